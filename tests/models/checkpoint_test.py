"""Loading model folders: errors, dtypes, shards, tokenizers."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import safetensors.numpy
from keras import ops

from keras_gen.models import CausalLM
from keras_gen.models import GPT2CausalLM
from keras_gen.tokenizers import Tokenizer
from tests.models import hf_models


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("llama"))
    return hf_models.save_model_folder("llama", folder), folder


@pytest.fixture
def copy(llama, tmp_path):
    """A writable copy of the llama folder."""
    folder = tmp_path / "model"
    shutil.copytree(llama[1], folder)
    return folder


def _logits(lm, batch=hf_models.FULL_BATCH):
    return ops.convert_to_numpy(lm(np.asarray(batch, "int32")))


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        CausalLM.from_pretrained(tmp_path / "nowhere")


def test_folder_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="No config.json"):
        CausalLM.from_pretrained(tmp_path)


def test_unsupported_architecture_names_the_supported_ones(copy):
    config = json.loads((copy / "config.json").read_text())
    config["architectures"] = ["BertForMaskedLM"]
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="BertForMaskedLM.*GPT2LMHeadModel.*Qwen2"):
        CausalLM.from_pretrained(copy)


def test_model_type_is_used_without_architectures(copy):
    config = json.loads((copy / "config.json").read_text())
    del config["architectures"]
    (copy / "config.json").write_text(json.dumps(config))
    assert type(CausalLM.from_pretrained(copy)).__name__ == "LlamaCausalLM"


def test_invalid_config_json(copy):
    (copy / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        CausalLM.from_pretrained(copy)


def _rewrite_weights(folder, change):
    path = os.path.join(folder, "model.safetensors")
    weights = safetensors.numpy.load_file(path)
    change(weights)
    safetensors.numpy.save_file(weights, path, metadata={"format": "pt"})


def test_missing_weight_is_named(copy):
    _rewrite_weights(copy, lambda w: w.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(ValueError, match="'model.layers.1.mlp.up_proj.weight'"):
        CausalLM.from_pretrained(copy)


def test_wrong_shape_is_named(copy):
    def shrink(weights):
        weights["model.layers.0.self_attn.k_proj.weight"] = np.zeros((4, 32), "float32")

    _rewrite_weights(copy, shrink)
    name = r"'model.layers.0.self_attn.k_proj.weight'"
    with pytest.raises(ValueError, match=name + r" has shape \(4, 32\).*\(16, 32\)"):
        CausalLM.from_pretrained(copy)


@pytest.mark.parametrize("keep", [4, 100, -64], ids=["header", "metadata", "data"])
def test_truncated_safetensors(copy, keep):
    path = copy / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    with pytest.raises(ValueError, match="model.safetensors.*truncated or corrupt"):
        CausalLM.from_pretrained(copy)


def test_corrupt_safetensors(copy):
    (copy / "model.safetensors").write_bytes(os.urandom(4096))
    with pytest.raises(ValueError, match="truncated or corrupt"):
        CausalLM.from_pretrained(copy)


def test_pickle_weights_are_refused(copy):
    os.remove(copy / "model.safetensors")
    (copy / "pytorch_model.bin").write_bytes(b"not opened")
    with pytest.raises(ValueError, match="pytorch_model.bin.*only safetensors"):
        CausalLM.from_pretrained(copy)


def test_no_weights_at_all(copy):
    os.remove(copy / "model.safetensors")
    with pytest.raises(FileNotFoundError, match="No \\*.safetensors"):
        CausalLM.from_pretrained(copy)


@pytest.mark.filterwarnings("ignore:No tokenizer.json")
def test_sharded_checkpoint_loads(llama, tmp_path):
    model, folder = llama
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    lm = CausalLM.from_pretrained(tmp_path)
    np.testing.assert_allclose(
        _logits(lm), hf_models.logits(model, hf_models.FULL_BATCH), atol=1e-4
    )


def test_shard_listed_in_the_index_but_missing(llama, tmp_path):
    model, _ = llama
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    os.remove(sorted(tmp_path.glob("*.safetensors"))[-1])
    with pytest.raises(FileNotFoundError, match="lists .*safetensors"):
        CausalLM.from_pretrained(tmp_path)


def test_missing_tokenizer_still_loads_and_explains(copy):
    os.remove(copy / "tokenizer.json")
    with pytest.warns(UserWarning, match="No tokenizer.json"):
        lm = CausalLM.from_pretrained(copy)
    assert lm.tokenizer is None
    assert len(lm.generate([1, 2, 3], max_new_tokens=2)) == 5
    with pytest.raises(ValueError, match="need a tokenizer"):
        lm.generate("hello", max_new_tokens=2)


def test_text_in_text_out_matches_transformers(llama):
    model, folder = llama
    lm = CausalLM.from_pretrained(folder)
    assert isinstance(lm.tokenizer, Tokenizer)
    assert lm.tokenizer.eos_token_ids == [hf_models.EOS, hf_models.EXTRA_EOS]
    hf_tokenizer = hf_models.transformers.AutoTokenizer.from_pretrained(folder)
    texts = ["the quick brown fox", "hello"]
    prompts = [hf_tokenizer(text)["input_ids"] for text in texts]
    stops = (hf_models.EOS, hf_models.EXTRA_EOS)
    expected = [
        # keras-gen leaves the stop token out of the text, special or not.
        hf_tokenizer.decode(
            row[:-1] if row[-1] in stops else row, skip_special_tokens=True
        )
        for row in hf_models.greedy(model, prompts, max_new_tokens=8)
    ]
    assert lm.generate(texts, max_new_tokens=8) == expected
    assert lm.generate(texts[0], max_new_tokens=8) == expected[0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_dtype_is_honoured(llama, dtype):
    model, folder = llama
    lm = CausalLM.from_pretrained(folder, dtype=dtype)
    for variable in lm.backbone.weights:
        assert keras.backend.standardize_dtype(variable.dtype) == dtype
    logits = _logits(lm)
    assert logits.dtype == np.float32
    reference = hf_models.logits(model, hf_models.FULL_BATCH)
    # Half precision: close, not equal.
    assert np.abs(logits - reference).max() < 0.1 * np.abs(reference).max()


@pytest.mark.filterwarnings("ignore:No tokenizer.json")
def test_dtype_defaults_to_the_checkpoint_dtype(llama, tmp_path):
    model, _ = llama
    model.to(hf_models.torch.bfloat16).save_pretrained(tmp_path)
    model.to(hf_models.torch.float32)
    lm = CausalLM.from_pretrained(tmp_path)
    assert keras.backend.standardize_dtype(lm.backbone.variable_dtype) == "bfloat16"
    lm.save_pretrained(tmp_path / "again")
    reloaded = hf_models.transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "again"
    )
    assert reloaded.dtype == hf_models.torch.bfloat16


def test_bad_dtype(llama):
    with pytest.raises(ValueError, match="`dtype` must be None or one of"):
        CausalLM.from_pretrained(llama[1], dtype="int8")


def test_subclass_must_match_the_architecture(llama):
    with pytest.raises(ValueError, match="LlamaCausalLM, not GPT2CausalLM"):
        GPT2CausalLM.from_pretrained(llama[1])


def test_save_pretrained_writes_the_tokenizer_and_generation_config(llama, tmp_path):
    lm = CausalLM.from_pretrained(llama[1])
    lm.save_pretrained(tmp_path)
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [hf_models.EOS, hf_models.EXTRA_EOS]
    hf_tokenizer = hf_models.transformers.AutoTokenizer.from_pretrained(tmp_path)
    text = "hello world"
    assert hf_tokenizer(text)["input_ids"] == lm.tokenizer.encode(text)
    assert CausalLM.from_pretrained(tmp_path).tokenizer.eos_token_ids == (
        lm.tokenizer.eos_token_ids
    )


@pytest.mark.filterwarnings("ignore:No tokenizer.json")
def test_save_over_a_sharded_folder_replaces_the_shards(llama, tmp_path):
    model, folder = llama
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    lm = CausalLM.from_pretrained(folder)
    lm.save_pretrained(tmp_path)
    assert not (tmp_path / "model.safetensors.index.json").exists()
    assert [p.name for p in tmp_path.glob("*.safetensors")] == ["model.safetensors"]
    np.testing.assert_allclose(
        _logits(CausalLM.from_pretrained(tmp_path)), _logits(lm), atol=1e-6
    )


def test_index_cannot_point_outside_the_folder(copy):
    index = {"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}}
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="outside the folder"):
        CausalLM.from_pretrained(copy)


def test_two_files_holding_the_same_tensor_are_refused(copy):
    # Without an index every *.safetensors file is read: a stray file that
    # repeats a tensor would otherwise win or lose silently.
    weights = safetensors.numpy.load_file(copy / "model.safetensors")
    name = "model.norm.weight"
    safetensors.numpy.save_file(
        {name: np.zeros_like(weights[name])}, copy / "zeros.safetensors"
    )
    with pytest.raises(ValueError, match="'model.norm.weight' is in both"):
        CausalLM.from_pretrained(copy)


@pytest.mark.parametrize(
    "key, value, error",
    [
        ("num_hidden_layers", -1, ValueError),
        ("num_hidden_layers", 0, ValueError),
        ("num_hidden_layers", 2.5, TypeError),
        ("hidden_size", "32", TypeError),
        ("vocab_size", None, TypeError),
    ],
)
def test_bad_sizes_in_the_config_are_refused(copy, key, value, error):
    config = json.loads((copy / "config.json").read_text())
    config[key] = value
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(error, match=f"config.json's {key}"):
        CausalLM.from_pretrained(copy)


def test_gpt2_layer_count_is_checked(tmp_path):
    model = hf_models.save_model_folder("gpt2", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["n_layer"] = 0
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="n_layer"):
        CausalLM.from_pretrained(tmp_path)
    assert model is not None


def test_tensors_the_config_does_not_use_are_named_in_a_warning(copy):
    config = json.loads((copy / "config.json").read_text())
    config["num_hidden_layers"] = 1
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match=r"tensors .* not used .*model.layers.1"):
        CausalLM.from_pretrained(copy)


def test_end_token_outside_the_vocabulary_is_left_out_with_a_warning(copy):
    # transformers' default 50256 on a small vocabulary.
    for name in ("generation_config.json", "config.json"):
        data = json.loads((copy / name).read_text())
        data["eos_token_id"] = 50256
        (copy / name).write_text(json.dumps(data))
    with pytest.warns(
        UserWarning, match=r"\[50256\] is outside the model.s vocabulary"
    ):
        lm = CausalLM.from_pretrained(copy)
    assert 50256 not in lm.tokenizer.eos_token_ids
    assert lm.generation_config.eos_token_id is None
    assert len(lm.generate([5, 6], max_new_tokens=3)) == 5


@pytest.mark.only_backend("jax")
def test_generation_config_round_trips_through_the_folder(llama, tmp_path):
    lm = CausalLM.from_pretrained(llama[1])
    lm.generation_config = lm.generation_config.replace(
        do_sample=True, top_k=7, temperature=0.6, repetition_penalty=1.1
    )
    lm.save_pretrained(tmp_path)
    loaded = CausalLM.from_pretrained(tmp_path)
    assert loaded.generation_config == lm.generation_config
    assert loaded.generate("hello", max_new_tokens=6, seed=2) == lm.generate(
        "hello", max_new_tokens=6, seed=2
    )
    theirs = hf_models.transformers.GenerationConfig.from_pretrained(tmp_path)
    assert (theirs.do_sample, theirs.top_k, theirs.temperature) == (True, 7, 0.6)
