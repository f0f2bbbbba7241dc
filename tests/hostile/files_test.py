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
        ("generation_config.json", "[1, 2]", "generation_config.json must hold a JSON object"),
        ("generation_config.json", "{not json", "generation_config.json is not valid JSON"),
        ("generation_config.json", b"\xff\xfe{}", "generation_config.json is not valid JSON"),
        ("generation_config.json", "null", "generation_config.json must hold a JSON object"),
        ("generation_config.json", "[" * 100000, "generation_config.json is not valid JSON"),
        ("config.json", '"a string"', "config.json must hold a JSON object"),
        ("config.json", "{", "config.json is not valid JSON"),
        ("tokenizer_config.json", "[]", "tokenizer_config.json must hold a JSON object"),
        ("tokenizer_config.json", '{"chat_template": "{% for %}"}', "tokenizer_config.json is not valid jinja2"),
        ("tokenizer_config.json", '{"chat_template": 5}', "tokenizer_config.json must be a string"),
        ("tokenizer_config.json", '{"chat_template": [1, 2]}', "tokenizer_config.json must be objects"),
        ("chat_template.jinja", "{{ unclosed", "chat_template.jinja is not valid jinja2"),
        ("tokenizer.json", "{}", "tokenizer.json is not a valid tokenizer file"),
    ],
)
def test_a_broken_model_file_is_named_when_loading(folder, tmp_path, file, content, match):
    target = _copy(folder, tmp_path)
    _write(target / file, content)
    with pytest.raises((ValueError, TypeError), match=match):
        CausalLM.from_pretrained(str(target))


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
    cut = {
        k: (v[:1] if "lora_A" in k else v[:, :1]) for k, v in tensors.items()
    }
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
        ({}, lambda p: _write(p, b"garbage" * 10), "is not a readable safetensors file"),
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
        ([("q", "a"), [{"role": "user", "content": "hi"}]], {}, TypeError, "different kinds"),
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
