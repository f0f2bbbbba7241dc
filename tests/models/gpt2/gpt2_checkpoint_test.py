"""GPT-2 checkpoints: keras-gen matches transformers."""

import os
import shutil

import numpy as np
import pytest
import safetensors.numpy
from keras import ops

from keras_gen.models import CausalLM
from keras_gen.models import GPT2CausalLM
from keras_gen.models.gpt2 import gpt2_checkpoint
from tests.models import hf_models
from tests.models.hf_models import model_folder  # noqa: F401 (fixture)

parametrize = pytest.mark.parametrize("model_folder", ["gpt2"], indirect=True)


@parametrize
def test_logits_match_transformers(model_folder):
    model, folder = model_folder
    lm = GPT2CausalLM.from_pretrained(folder)
    assert isinstance(lm, GPT2CausalLM)
    np.testing.assert_allclose(
        ops.convert_to_numpy(lm(np.asarray(hf_models.FULL_BATCH, "int32"))),
        hf_models.logits(model, hf_models.FULL_BATCH),
        atol=1e-4,
    )


@parametrize
def test_greedy_ragged_batch_matches_transformers(model_folder):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    prompts = hf_models.RAGGED_PROMPTS
    assert lm.generate(prompts, max_new_tokens=20) == hf_models.greedy(model, prompts)


@parametrize
def test_save_pretrained_round_trips_through_transformers(model_folder, tmp_path):
    _, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    lm.save_pretrained(tmp_path)
    reloaded = hf_models.transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    np.testing.assert_allclose(
        hf_models.logits(reloaded, hf_models.FULL_BATCH),
        ops.convert_to_numpy(lm(np.asarray(hf_models.FULL_BATCH, "int32"))),
        atol=1e-4,
    )


@pytest.mark.filterwarnings("ignore:No tokenizer.json")
@parametrize
def test_weight_names_without_the_transformer_prefix_load(model_folder, tmp_path):
    # The original OpenAI upload names weights `h.0.attn...`, not
    # `transformer.h.0.attn...`, and keeps attention mask buffers.
    model, folder = model_folder
    weights = safetensors.numpy.load_file(os.path.join(folder, "model.safetensors"))
    weights = {name.removeprefix("transformer."): w for name, w in weights.items()}
    weights["h.0.attn.bias"] = np.tril(np.ones((1, 1, 128, 128), "float32"))
    safetensors.numpy.save_file(weights, tmp_path / "model.safetensors")
    shutil.copy(os.path.join(folder, "config.json"), tmp_path)
    lm = CausalLM.from_pretrained(tmp_path)
    np.testing.assert_allclose(
        ops.convert_to_numpy(lm(np.asarray(hf_models.FULL_BATCH, "int32"))),
        hf_models.logits(model, hf_models.FULL_BATCH),
        atol=1e-4,
    )


@pytest.mark.parametrize(
    "key, value",
    [
        ("activation_function", "relu"),
        ("scale_attn_by_inverse_layer_idx", True),
        ("tie_word_embeddings", False),
    ],
)
def test_unsupported_gpt2_options_are_named(key, value):
    config = {**hf_models.make_model("gpt2").config.to_dict(), key: value}
    with pytest.raises(ValueError, match=key):
        gpt2_checkpoint.backbone_from_config(config, "GPT2LMHeadModel")
