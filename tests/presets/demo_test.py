"""The bundled demo model and the tool that trains it."""

import json
import os
import re
import subprocess
import sys

import pytest

from keras_gen import presets
from keras_gen import processors
from keras_gen import samplers
from keras_gen.models import CausalLM
from keras_gen.models import GPT2CausalLM
from tests.markers import ON_TORCH_ONLY

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "keras_gen", "presets", "demo")
FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "training.json",
)
COMMON_WORDS = {"the", "is", "a", "of", "to", "and", "in", "be", "an", "for", "are"}


@pytest.fixture(scope="module")
def demo():
    return CausalLM.from_preset("demo")


def test_demo_files_are_bundled_and_small():
    assert "demo" in presets.list_presets()
    for name in FILES:
        assert os.path.isfile(os.path.join(DEMO, name)), name
    assert os.path.getsize(os.path.join(DEMO, "model.safetensors")) < 15 * 2**20
    with open(os.path.join(DEMO, "training.json")) as f:
        record = json.load(f)
    assert record["corpus"]["source"] == "pydoc_data.topics"
    assert record["final_validation_loss"] == record["history"][-1]["validation_loss"]
    assert record["settings"]["seed"] == 1337


def test_from_preset_loads_the_demo_model(demo):
    assert isinstance(demo, GPT2CausalLM)
    assert demo.tokenizer is not None and demo.tokenizer.eos_token_ids
    assert demo.backbone.max_sequence_length == 256


def test_demo_writes_english_about_python(demo):
    # Greedy decoding of a model this small loops on newlines without a
    # repetition penalty.
    text = demo.generate(
        "The for statement",
        max_new_tokens=48,
        strip_prompt=True,
        do_sample=False,
        processors=[processors.RepetitionPenalty(1.3)],
    )
    words = re.findall(r"[A-Za-z]+", text.lower())
    assert len(words) >= 10, text
    assert len(COMMON_WORDS & set(words)) >= 3, text


# Reading the preset's options is host-side logic: one backend.
@pytest.mark.only_backend("jax")
def test_demo_samples_with_its_generation_config(demo):
    # generation_config.json: top-k 40, temperature 0.8, repetition penalty
    # 1.2, 64 new tokens; the same as compiling them.
    assert demo.generation_config.to_dict() == {
        "max_new_tokens": 64,
        "do_sample": True,
        "temperature": 0.8,
        "top_k": 40,
        "repetition_penalty": 1.2,
        "eos_token_id": [0],
    }
    prompts = ["The for statement", "A class"]
    ours = demo.generate(prompts, seed=0, return_dict=True)
    compiled = CausalLM.from_preset("demo")
    compiled.compile(
        sampler=samplers.TopKSampler(k=40, temperature=0.8),
        processors=[processors.RepetitionPenalty(1.2)],
    )
    theirs = compiled.generate(prompts, max_new_tokens=64, seed=0, return_dict=True)
    assert ours.token_ids == theirs.token_ids
    assert not ours.text[0].endswith("\n\n\n")
    # compile(sampler="greedy") still decodes greedily (with the penalty).
    compiled.compile(sampler="greedy")
    greedy = demo.generate(prompts, do_sample=False, max_new_tokens=16)
    assert compiled.generate(prompts, max_new_tokens=16) == greedy


def test_from_preset_errors(tmp_path):
    with pytest.raises(ValueError, match="demo"):
        CausalLM.from_preset("no-such-preset")
    with pytest.raises(ValueError, match="Unknown preset"):
        presets.preset_path("no-such-preset")


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_training_tool_is_deterministic(tmp_path):
    tiny = [
        "--steps",
        "2",
        "--rounds",
        "1",
        "--warmup-steps",
        "1",
        "--batch-size",
        "2",
        "--sequence-length",
        "32",
        "--num-layers",
        "1",
        "--hidden-dim",
        "16",
        "--intermediate-dim",
        "32",
        "--num-heads",
        "2",
        "--vocabulary-size",
        "300",
    ]
    outputs = []
    for name in ("a", "b"):
        output = tmp_path / name
        result = subprocess.run(
            [
                sys.executable,
                "tools/train_demo_model.py",
                "--output",
                str(output),
                *tiny,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "jax"},
        )
        assert result.returncode == 0, result.stderr[-2000:]
        outputs.append(output)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), (
            name
        )
    record = json.loads((outputs[0] / "training.json").read_text())
    assert record["settings"]["steps"] == 2 and "final_validation_loss" in record
    assert CausalLM.from_pretrained(str(outputs[0])).tokenizer.vocabulary_size == 300


@ON_TORCH_ONLY  # jax's int8: tests/models/causal_lm_test.py
@pytest.mark.parametrize("quantize_activations", [True, False])
def test_int8_stays_close_to_float(quantize_activations):
    # A trained model, loaded from disk and quantized before its first call.
    lm = CausalLM.from_preset("demo")
    kwargs = dict(
        max_new_tokens=8, do_sample=False, return_dict=True, output_log_probs=True
    )
    prompts = ["The history of", "A river is"]
    reference = lm.generate(prompts, **kwargs)
    lm.quantize("int8", quantize_activations=quantize_activations)
    quantized = lm.generate(prompts, **kwargs)
    assert quantized.token_ids == reference.token_ids
    for a, b in zip(reference.log_probs, quantized.log_probs):
        assert abs(a - b).max() < 0.1
