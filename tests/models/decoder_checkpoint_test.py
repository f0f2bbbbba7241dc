"""Every decoder family beyond Llama matches transformers: logits, greedy
tokens of a ragged batch, and a save that transformers reads back."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_gen.models import CausalLM
from keras_gen.models import GemmaCausalLM
from keras_gen.models import MixtralCausalLM
from keras_gen.models import Olmo2CausalLM
from keras_gen.models import Phi3CausalLM
from keras_gen.models import Qwen3CausalLM
from keras_gen.models import SmolLM3CausalLM
from tests.models import hf_models
from tests.models.hf_models import model_folder  # noqa: F401 (fixture)

parametrize = pytest.mark.parametrize(
    "model_folder", hf_models.DECODER_KINDS, indirect=True
)
# `model_type` -> the class `CausalLM.from_pretrained` returns.
CLASSES = {
    "qwen3": Qwen3CausalLM,
    "qwen3_moe": Qwen3CausalLM,
    "gemma": GemmaCausalLM,
    "gemma2": GemmaCausalLM,
    "gemma3_text": GemmaCausalLM,
    "phi3": Phi3CausalLM,
    "olmo2": Olmo2CausalLM,
    "mixtral": MixtralCausalLM,
    "smollm3": SmolLM3CausalLM,
}
# Phi-3's tiny config switches to its long rope factors past 16 positions;
# transformers' `generate` then recomputes the whole cache (see
# `test_phi3_long_factors_match_a_full_forward_pass`): stay below.
NEW_TOKENS = {"phi3": 8}
# Past the 16 trained positions, where each scaling changes the rotation.
LONG_SEQUENCE = [[hf_models.BOS] + [5, 9, 12, 30, 40, 22, 7, 13, 3, 50, 61] * 3]


TINY = dict(
    vocabulary_size=50,
    num_layers=2,
    num_query_heads=4,
    num_key_value_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
)


def _logits(lm, token_ids):
    return ops.convert_to_numpy(lm(np.asarray(token_ids, "int32")))


@parametrize
def test_logits_match_transformers(model_folder):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    assert type(lm) is CLASSES[model.config.model_type]
    np.testing.assert_allclose(
        _logits(lm, hf_models.FULL_BATCH),
        hf_models.logits(model, hf_models.FULL_BATCH),
        atol=1e-4,
    )


@parametrize
def test_greedy_ragged_batch_matches_transformers(model_folder):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    prompts = hf_models.RAGGED_PROMPTS
    new_tokens = NEW_TOKENS.get(model.config.model_type, 20)
    assert lm.generate(prompts, max_new_tokens=new_tokens) == hf_models.greedy(
        model, prompts, max_new_tokens=new_tokens
    )


# The rope scalings are checked where they differ: past the trained length.
SAVED_SEQUENCES = [
    *((kind, hf_models.FULL_BATCH) for kind in hf_models.DECODER_KINDS),
    *((kind, LONG_SEQUENCE) for kind in hf_models.ROPE_KINDS),
]


@pytest.mark.parametrize(
    "model_folder, sequence",
    SAVED_SEQUENCES,
    indirect=["model_folder"],
    ids=[kind for kind, _ in SAVED_SEQUENCES],
)
@pytest.mark.only_backend("jax")
def test_save_pretrained_round_trips_through_transformers(
    model_folder, sequence, tmp_path
):
    _, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    lm.save_pretrained(tmp_path)
    reloaded = hf_models.transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    np.testing.assert_allclose(
        hf_models.logits(reloaded, sequence), _logits(lm, sequence), atol=1e-4
    )
    again = CausalLM.from_pretrained(tmp_path)
    config = {**lm.backbone.get_config(), "name": None}
    assert {**again.backbone.get_config(), "name": None} == config


@pytest.mark.parametrize("model_folder", ["phi3"], indirect=True)
def test_phi3_long_factors_match_a_full_forward_pass(model_folder):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    # 20 positions: past the 16 of `original_max_position_embeddings`.
    sequence = [([hf_models.BOS] + [5, 9, 12, 30, 40, 22, 7, 13, 3, 50] * 2)[:20]]
    np.testing.assert_allclose(
        _logits(lm, sequence), hf_models.logits(model, sequence), atol=1e-4
    )
    rotary = lm.backbone.rotary_embedding
    assert rotary.long_inverse_frequencies != rotary.inverse_frequencies
    assert rotary.attention_factor == pytest.approx(np.sqrt(1 + np.log(8) / np.log(16)))


@pytest.mark.parametrize("model_folder", hf_models.ROPE_KINDS, indirect=True)
def test_rope_scalings_match_transformers_past_the_trained_length(model_folder):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    rotary = lm.backbone.rotary_embedding
    kind = {"qwen3": "yarn", "llama": "dynamic", "phi3": "longrope"}
    assert rotary.scaling["rope_type"] == kind[model.config.model_type]
    np.testing.assert_allclose(
        _logits(lm, LONG_SEQUENCE), hf_models.logits(model, LONG_SEQUENCE), atol=1e-4
    )
    if model.config.model_type == "phi3":
        # transformers' `generate` recomputes the cache when LongRoPE
        # switches factors (see `test_phi3_long_factors_...`).
        assert rotary.rotary_dim == 4 and rotary.head_dim == 8
        return
    # Greedy decoding that crosses position 16. Dynamic NTK follows each
    # row's own furthest position (transformers takes the batch's), so each
    # row equals transformers' tokens for that prompt alone.
    prompts = hf_models.RAGGED_PROMPTS
    expected = [hf_models.greedy(model, [p], max_new_tokens=16)[0] for p in prompts]
    assert lm.generate(prompts, max_new_tokens=16) == expected
    if model.config.model_type == "llama":
        # No limit at max_position_embeddings: dynamic NTK runs past it.
        assert lm.backbone.max_sequence_length is None
        row = lm.generate([prompts[2]], max_length=40, stop_token_ids=[])[0]
        assert len(row) == 40


@pytest.mark.only_backend("jax")  # config reading only
@pytest.mark.parametrize("model_folder", ["smollm3"], indirect=True)
def test_smollm3_leaves_rope_out_of_its_nope_layers(model_folder):
    from keras_gen.models import SmolLM3Backbone
    from keras_gen.models.smollm3 import smollm3_checkpoint

    model, folder = model_folder
    backbone = CausalLM.from_pretrained(folder).backbone
    assert backbone.no_rope_layers == [1]
    blocks = backbone.transformer_layers
    assert [block.rotary_embedding is None for block in blocks] == [False, True]
    assert [backbone.layer_sliding_window(i) for i in range(2)] == [None, 4]
    config = model.config.to_dict()
    for flags in ([1], [1, 2], "1,0"):
        with pytest.raises(ValueError, match="no_rope_layers"):
            smollm3_checkpoint.backbone_from_config(
                {**config, "no_rope_layers": flags}, "SmolLM3ForCausalLM"
            )
    # Without the list, transformers' interval rule (every 4th by default).
    del config["no_rope_layers"]
    config.pop("no_rope_layer_interval")
    config["num_hidden_layers"] = 8
    config["layer_types"] = None
    read = smollm3_checkpoint.backbone_from_config(config, "SmolLM3ForCausalLM")
    assert read.no_rope_layers == [3, 7] and read.sliding_window_layers == [3, 7]
    assert SmolLM3Backbone(**{**TINY, "num_layers": 5}).no_rope_layers == [3]


@pytest.mark.parametrize("model_folder", ["gemma2"], indirect=True)
def test_gemma2_soft_caps_bind(model_folder):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    logits = _logits(lm, hf_models.FULL_BATCH)
    # The final cap is 5: logits press against it, and never pass it.
    assert 4.5 < np.abs(logits).max() < 5.0
    backbone = lm.backbone
    assert [backbone.layer_sliding_window(i) for i in range(2)] == [4, None]
    assert backbone.transformer_layers[0].attention.logit_softcap == 2.0


@pytest.mark.parametrize("model_folder", ["gemma2"], indirect=True)
def test_gemma2_in_bfloat16_and_sharded(model_folder, tmp_path):
    model, _ = model_folder
    model.to(hf_models.torch.bfloat16).save_pretrained(tmp_path, max_shard_size="20KB")
    model.to(hf_models.torch.float32)
    hf_models.save_tokenizer(str(tmp_path))
    assert (tmp_path / "model.safetensors.index.json").exists()
    lm = CausalLM.from_pretrained(tmp_path)
    reference = hf_models.logits(model, hf_models.FULL_BATCH)
    logits = _logits(lm, hf_models.FULL_BATCH)
    assert np.abs(logits - reference).max() < 0.1 * np.abs(reference).max()
    prompts = hf_models.RAGGED_PROMPTS
    assert len(lm.generate(prompts, max_new_tokens=4)) == len(prompts)


# Every family on jax; one on the other backends, whose variable reading and
# writing the GPT-2 saving tests also cover.
SAVING_KINDS = [
    pytest.param(
        kind, marks=() if kind == "gemma2" else pytest.mark.only_backend("jax")
    )
    for kind in ("llama", "qwen2", "mistral") + hf_models.DECODER_KINDS
]


@pytest.mark.parametrize("model_folder", SAVING_KINDS, indirect=True)
@pytest.mark.filterwarnings("error::UserWarning")
def test_keras_saving_keeps_the_model_tokenizer_and_generation_config(
    model_folder, tmp_path
):
    _, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    path = str(tmp_path / "lm.keras")
    lm.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is type(lm)
    assert restored.generation_config == lm.generation_config
    assert restored.tokenizer.eos_token_ids == lm.tokenizer.eos_token_ids
    np.testing.assert_array_equal(
        _logits(restored, hf_models.FULL_BATCH), _logits(lm, hf_models.FULL_BATCH)
    )
    text = "the quick brown fox"
    assert restored.tokenizer.encode(text) == lm.tokenizer.encode(text)


@pytest.mark.parametrize(
    "model_folder",
    [
        "gemma2",
        *(
            pytest.param(k, marks=pytest.mark.only_backend("jax"))
            for k in ("llama", "qwen3_moe")
        ),
    ],
    indirect=True,
)
def test_int8_models_save_as_keras_and_as_float_checkpoints(model_folder, tmp_path):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    lm.quantize("int8")
    quantized = _logits(lm, hf_models.FULL_BATCH)
    lm.save(str(tmp_path / "lm.keras"))
    restored = keras.saving.load_model(str(tmp_path / "lm.keras"))
    assert restored.backbone.embed_tokens.quantization_mode == "int8"
    for block in restored.backbone.transformer_layers:
        if block.mlp is not None:
            assert block.mlp.router.quantization_mode is None
    np.testing.assert_array_equal(_logits(restored, hf_models.FULL_BATCH), quantized)
    # A Hugging Face folder holds floats: the int8 weights dequantized, which
    # with float activations compute the weight-only int8 model's logits.
    weight_only = CausalLM.from_pretrained(folder)
    weight_only.quantize("int8", quantize_activations=False)
    weight_only.save_pretrained(tmp_path / "hf")
    reloaded = hf_models.transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "hf"
    )
    weight_only_logits = _logits(weight_only, hf_models.FULL_BATCH)
    np.testing.assert_allclose(
        hf_models.logits(reloaded, hf_models.FULL_BATCH), weight_only_logits, atol=1e-4
    )
    # Both near the float model (raw int8 values read as floats are 1e3 off).
    reference = hf_models.logits(model, hf_models.FULL_BATCH)
    for logits in (quantized, weight_only_logits):
        assert np.abs(logits - reference).max() < 0.2 * np.abs(reference).max()


@pytest.mark.parametrize(
    "model_folder",
    ["llama", pytest.param("phi3", marks=pytest.mark.only_backend("jax"))],
    indirect=True,
)
def test_int4_models_generate_save_as_keras_and_as_float_checkpoints(
    model_folder, tmp_path
):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    # Groups of 16 inputs: several groups per kernel at these sizes.
    lm.quantize("int4", config=keras.quantizers.Int4QuantizationConfig(block_size=16))
    # Weight-only int4 on the blocks' projections; embeddings and head stay.
    block = lm.backbone.transformer_layers[0]
    assert block.o_proj.quantization_mode == "int4"
    assert block.o_proj.kernel_scale.shape[0] > 1  # groups
    assert lm.backbone.embed_tokens.quantization_mode is None
    assert lm.backbone.lm_head is None or lm.backbone.lm_head.quantization_mode is None
    quantized = _logits(lm, hf_models.FULL_BATCH)
    reference = hf_models.logits(model, hf_models.FULL_BATCH)
    # 16 levels per group are coarse for these tiny random models (about 7%
    # of a weight each), but the logits stay those of the same model.
    assert np.corrcoef(quantized.ravel(), reference.ravel())[0, 1] > 0.85
    tokens = lm.generate(hf_models.RAGGED_PROMPTS, max_new_tokens=6)
    assert [len(t) for t in tokens] == [len(p) + 6 for p in hf_models.RAGGED_PROMPTS]
    lm.save(str(tmp_path / "lm.keras"))
    restored = keras.saving.load_model(str(tmp_path / "lm.keras"))
    np.testing.assert_array_equal(_logits(restored, hf_models.FULL_BATCH), quantized)
    # A Hugging Face folder holds the int4 weights dequantized to floats:
    # transformers computes the int4 model's logits from it.
    lm.save_pretrained(tmp_path / "hf")
    reloaded = hf_models.transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "hf"
    )
    np.testing.assert_allclose(
        hf_models.logits(reloaded, hf_models.FULL_BATCH), quantized, atol=1e-4
    )


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("model_folder", ["phi3", "gemma3", "qwen3_moe"], indirect=True)
def test_the_engine_serves_the_families_as_generate_does(model_folder):
    from keras_gen import GenerationConfig
    from keras_gen.serving import Engine

    _, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    # Rows at different positions share each step; the longest crosses
    # Phi-3's long-factor length while the others stay below it.
    prompts = hf_models.RAGGED_PROMPTS + [hf_models.FULL_BATCH[0] + [4, 5, 6]]
    config = GenerationConfig(max_new_tokens=14)
    with Engine(lm, max_batch_size=2, max_length=64, chunk_size=3) as engine:
        records = [h.result(120) for h in [engine.submit(p, config) for p in prompts]]
    for prompt, record in zip(prompts, records):
        alone = lm.generate([prompt], max_new_tokens=14, return_dict=True)
        assert record.token_ids == alone.token_ids
