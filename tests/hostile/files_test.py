"""Hostile files: every broken file a user hands us is a `ValueError` or
`TypeError` that names the file, at load time (not at first use)."""

import json
import os
import shutil

import numpy as np
import pytest
import safetensors.numpy

from keras_gen.models import CausalLM

# File and argument checks do not depend on the backend.
pytestmark = pytest.mark.only_backend("jax")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The demo model saved as a Hugging Face folder."""
    path = tmp_path_factory.mktemp("demo")
    CausalLM.from_preset("demo").save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def adapter(folder, tmp_path_factory):
    """A rank-2 LoRA adapter of the demo model, in PEFT's format."""
    lm = CausalLM.from_pretrained(folder)
    lm.backbone.enable_lora(2)
    path = tmp_path_factory.mktemp("adapter")
    lm.save_lora(str(path))
    return str(path)


def _copy(source, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(source, target)
    return target


def _write(path, content):
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as f:
        f.write(content)


@pytest.mark.parametrize(
    "file, content, match",
    [
        (
            "generation_config.json",
            "[1, 2]",
            "generation_config.json must hold a JSON object",
        ),
        (
            "generation_config.json",
            "{not json",
            "generation_config.json is not valid JSON",
        ),
        (
            "generation_config.json",
            b"\xff\xfe{}",
            "generation_config.json is not valid JSON",
        ),
        (
            "generation_config.json",
            "null",
            "generation_config.json must hold a JSON object",
        ),
        (
            "generation_config.json",
            "[" * 100000,
            "generation_config.json is not valid JSON",
        ),
        ("config.json", '"a string"', "config.json must hold a JSON object"),
        ("config.json", "{", "config.json is not valid JSON"),
        (
            "tokenizer_config.json",
            "[]",
            "tokenizer_config.json must hold a JSON object",
        ),
        (
            "tokenizer_config.json",
            '{"chat_template": "{% for %}"}',
            "tokenizer_config.json is not valid jinja2",
        ),
        (
            "tokenizer_config.json",
            '{"chat_template": 5}',
            "tokenizer_config.json must be a string",
        ),
        (
            "tokenizer_config.json",
            '{"chat_template": [1, 2]}',
            "tokenizer_config.json must be objects",
        ),
        (
            "chat_template.jinja",
            "{{ unclosed",
            "chat_template.jinja is not valid jinja2",
        ),
        ("tokenizer.json", "{}", "tokenizer.json is not a valid tokenizer file"),
    ],
)
def test_a_broken_model_file_is_named_when_loading(
    folder, tmp_path, file, content, match
):
    target = _copy(folder, tmp_path)
    _write(target / file, content)
    with pytest.raises((ValueError, TypeError), match=match):
        CausalLM.from_pretrained(str(target))


def _with_config(source, tmp_path, change):
    target = _copy(source, tmp_path)
    config = json.loads((target / "config.json").read_text())
    _write(target / "config.json", json.dumps({**config, **change}))
    return str(target)


TOO_LARGE = "describes a model of at least"


@pytest.mark.parametrize(
    "change, error, match",
    [
        # Sizes far beyond the weights: refused before anything is built
        # (these took all memory, or hours, to build before).
        ({"n_embd": 10**9}, ValueError, TOO_LARGE),
        ({"n_layer": 10**6}, ValueError, TOO_LARGE),
        ({"n_inner": 10**10}, ValueError, TOO_LARGE),
        ({"vocab_size": 10**10}, ValueError, TOO_LARGE),
        ({"n_head": 3}, ValueError, "config.json in .*divisible by `num_heads`"),
        ({"n_head": 0}, ValueError, "n_head"),
        ({"n_positions": 0}, ValueError, "n_positions"),
        ({"n_embd": 1.5}, TypeError, "n_embd"),
        ({"n_embd": "128"}, TypeError, "n_embd"),
        ({"layer_norm_epsilon": "nan"}, TypeError, "layer_norm_epsilon"),
        ({"layer_norm_epsilon": -1}, ValueError, "layer_norm_epsilon"),
        ({"layer_norm_epsilon": 0}, ValueError, "layer_norm_epsilon"),
        ({"activation_function": "relu"}, ValueError, "activation_function"),
    ],
)
def test_a_hostile_gpt2_config_is_refused_by_name(
    folder, tmp_path, change, error, match
):
    with pytest.raises(error, match=match):
        CausalLM.from_pretrained(_with_config(folder, tmp_path, change))


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    """A tiny Llama 3 (rope scaling included) saved by transformers."""
    pytest.importorskip("transformers")
    from tests.models.hf_models import save_model_folder

    path = str(tmp_path_factory.mktemp("llama"))
    save_model_folder("llama", path)
    return path


def _rope(**change):
    base = {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 16,
        "rope_theta": 500000.0,
        "rope_type": "llama3",
    }
    return {"rope_parameters": {**base, **change}}


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"num_hidden_layers": 10**5}, ValueError, TOO_LARGE),
        ({"head_dim": 10**8}, ValueError, TOO_LARGE),
        ({"intermediate_size": 10**9}, ValueError, TOO_LARGE),
        ({"num_key_value_heads": 3}, ValueError, "divisible by `num_key_value_heads`"),
        ({"num_key_value_heads": 0}, ValueError, "num_key_value_heads"),
        ({"rms_norm_eps": -1}, ValueError, "rms_norm_eps"),
        ({"tie_word_embeddings": "yes"}, TypeError, "tie_word_embeddings"),
        ({"hidden_act": "nope"}, ValueError, "hidden_act"),
        ({"rope_parameters": [1]}, TypeError, "rope_parameters"),
        (_rope(rope_theta="x"), TypeError, "rope_theta"),
        (_rope(rope_theta=-1), ValueError, "rope_theta"),
        (_rope(rope_theta=float("nan")), ValueError, "rope_theta"),
        (_rope(factor="nan"), TypeError, "factor"),
        (_rope(factor=-2), ValueError, "factor"),
        (_rope(factor=0), ValueError, "factor"),
        (
            _rope(original_max_position_embeddings=0),
            ValueError,
            "original_max_position_embeddings",
        ),
        (_rope(low_freq_factor=5), ValueError, "low_freq_factor.*must be below"),
        (_rope(high_freq_factor=-1), ValueError, "high_freq_factor"),
        (_rope(rope_type="ntk"), ValueError, "rope scaling type 'ntk'"),
        (_rope(rope_type="yarn", beta_fast=float("nan")), ValueError, "beta_fast"),
        (_rope(rope_type="yarn", mscale="x"), TypeError, "mscale"),
        (_rope(rope_type="dynamic", factor=-1), ValueError, "factor"),
        (_rope(partial_rotary_factor=0.5), ValueError, "partial_rotary_factor"),
        (_rope(rope_type="linear", factor=None), TypeError, "factor"),
    ],
)
def test_a_hostile_llama_config_is_refused_by_name(
    llama_folder, tmp_path, change, error, match
):
    with pytest.raises(error, match=f"config.json in .*{match}"):
        CausalLM.from_pretrained(_with_config(llama_folder, tmp_path, change))


def _weights_with(folder, tmp_path, change):
    target = _copy(folder, tmp_path)
    path = str(target / "model.safetensors")
    tensors = safetensors.numpy.load_file(path)
    name = "transformer.h.0.mlp.c_fc.weight"
    tensors[name] = change(tensors[name])
    safetensors.numpy.save_file(tensors, path)
    return str(target)


def _one_inf(array):
    array = array.copy()
    array[3, 5] = np.inf
    return array


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda a: np.full_like(a, np.nan), "holds non-finite values"),
        (_one_inf, "holds non-finite values"),
        (lambda a: a.astype(np.int32), "holds int32 values, not floats"),
        (lambda a: a > 0, "holds bool values, not floats"),
        (lambda a: a[:-1], "has shape"),
    ],
)
def test_broken_weights_are_named_with_their_file(folder, tmp_path, change, match):
    with pytest.raises(ValueError, match=f"transformer.h.0.mlp.c_fc.weight.*{match}"):
        CausalLM.from_pretrained(_weights_with(folder, tmp_path, change))


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_weights_of_another_float_type_load_and_generate(folder, tmp_path, dtype):
    lm = CausalLM.from_pretrained(
        _weights_with(folder, tmp_path, lambda a: a.astype(dtype))
    )
    assert lm.generate("The for statement", max_new_tokens=4).startswith("The for")


def _adapter_with(adapter, tmp_path, config=None, tensors=None):
    target = _copy(adapter, tmp_path, "adapter")
    if config is not None:
        base = json.loads((target / "adapter_config.json").read_text())
        _write(target / "adapter_config.json", json.dumps({**base, **config}))
    if tensors is not None:
        tensors(target / "adapter_model.safetensors")
    return str(target)


def _scale_rank(path):
    tensors = safetensors.numpy.load_file(str(path))
    cut = {k: (v[:1] if "lora_A" in k else v[:, :1]) for k, v in tensors.items()}
    safetensors.numpy.save_file(cut, str(path))


def _poison(path):
    tensors = safetensors.numpy.load_file(str(path))
    key = sorted(tensors)[0]
    tensors[key] = np.full_like(tensors[key], np.nan)
    safetensors.numpy.save_file(tensors, str(path))


@pytest.mark.parametrize(
    "config, tensors, match",
    [
        ({"r": 0}, None, "`r` must be an int >= 1"),
        ({"r": "two"}, None, "`r` must be an int >= 1"),
        ({"r": 8}, None, "has rank 2, but its config says r=8"),
        ({"rank_pattern": {"c_attn": 4}}, None, "has rank 2, but its config says r=4"),
        ({}, _scale_rank, "has rank 1, but its config says r=2"),
        ({"lora_alpha": float("nan")}, None, "lora_alpha"),
        ({"lora_alpha": "x"}, None, "lora_alpha"),
        ({"target_modules": ["nothing_here"]}, None, "match none of this"),
        ({"target_modules": "(("}, None, "target_modules"),
        ({"target_modules": 5}, None, "target_modules"),
        ({"peft_type": "IA3"}, None, "LoRA adapters only"),
        ({"use_dora": True}, None, "use_dora"),
        ({}, _poison, "must hold finite floats"),
        (
            {},
            lambda p: _write(p, b"garbage" * 10),
            "is not a readable safetensors file",
        ),
        ({}, lambda p: _write(p, b""), "is not a readable safetensors file"),
    ],
)
def test_a_broken_adapter_is_named(folder, adapter, tmp_path, config, tensors, match):
    path = _adapter_with(adapter, tmp_path, config, tensors)
    lm = CausalLM.from_pretrained(folder)
    with pytest.raises(ValueError, match=match):
        lm.load_lora(path)


def test_an_adapter_config_that_is_not_an_object_is_named(folder, adapter, tmp_path):
    path = _adapter_with(adapter, tmp_path)
    _write(os.path.join(path, "adapter_config.json"), "[]")
    with pytest.raises(ValueError, match="adapter_config.json must hold a JSON object"):
        CausalLM.from_pretrained(folder).load_lora(path)


def test_a_good_adapter_still_loads(folder, adapter):
    assert CausalLM.from_pretrained(folder).load_lora(adapter) > 0


@pytest.mark.parametrize(
    "x, kwargs, error, match",
    [
        (["abc", ("q", "a")], {}, TypeError, "different kinds"),
        (
            [("q", "a"), [{"role": "user", "content": "hi"}]],
            {},
            TypeError,
            "different kinds",
        ),
        (["abc", 5], {}, TypeError, "Example 1"),
        (["abc"], {"batch_size": 0}, ValueError, "batch_size"),
        (["abc"], {"batch_size": -2}, ValueError, "batch_size"),
        (["abc"], {"batch_size": 1.5}, TypeError, "batch_size"),
        ([], {}, ValueError, "empty"),
    ],
)
def test_bad_training_data_is_refused_before_training(folder, x, kwargs, error, match):
    lm = CausalLM.from_pretrained(folder)
    with pytest.raises(error, match=match):
        lm.fit(x, epochs=1, **kwargs)
