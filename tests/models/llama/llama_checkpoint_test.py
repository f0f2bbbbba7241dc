"""Llama, Qwen2 and Mistral checkpoints: keras-gen matches transformers."""

import numpy as np
import pytest
from keras import ops

from keras_gen.models import CausalLM
from keras_gen.models import LlamaBackbone
from keras_gen.models import LlamaCausalLM
from keras_gen.models import decoder_checkpoint
from keras_gen.models.llama import llama_checkpoint
from tests.models import hf_models
from tests.models.hf_models import model_folder  # noqa: F401 (fixture)

KINDS = ("llama", "qwen2", "mistral")
parametrize = pytest.mark.parametrize("model_folder", KINDS, indirect=True)


@parametrize
def test_logits_match_transformers(model_folder):
    model, folder = model_folder
    lm = CausalLM.from_pretrained(folder)
    assert isinstance(lm, LlamaCausalLM)
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
    again = CausalLM.from_pretrained(tmp_path)
    config = {**lm.backbone.get_config(), "name": None}
    assert {**again.backbone.get_config(), "name": None} == config


def test_architectures_map_to_backbone_options():
    qwen2 = hf_models.make_model("qwen2").config.to_dict()
    backbone = llama_checkpoint.backbone_from_config(qwen2, "Qwen2ForCausalLM")
    assert backbone.query_key_value_bias and not backbone.attention_output_bias
    assert backbone.tie_word_embeddings and backbone.lm_head is None
    assert [backbone.layer_sliding_window(i) for i in range(2)] == [None, 4]

    mistral = hf_models.make_model("mistral").config.to_dict()
    backbone = llama_checkpoint.backbone_from_config(mistral, "MistralForCausalLM")
    assert [backbone.layer_sliding_window(i) for i in range(2)] == [4, 4]
    assert not backbone.query_key_value_bias


def test_qwen2_without_use_sliding_window_has_no_window():
    config = {**hf_models.make_model("qwen2").config.to_dict()}
    config.update(use_sliding_window=False, layer_types=None)
    backbone = llama_checkpoint.backbone_from_config(config, "Qwen2ForCausalLM")
    assert backbone.sliding_window is None


def test_rope_reads_transformers_4_and_5_configs():
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    v4 = {"rope_theta": 5e5, "rope_scaling": scaling}
    v5 = {"rope_parameters": {**scaling, "rope_theta": 5e5}}
    expected = (5e5, scaling, 1.0)
    assert decoder_checkpoint.rope(v4) == decoder_checkpoint.rope(v5) == expected
    assert decoder_checkpoint.rope({"rope_theta": 1e4}) == (1e4, None, 1.0)
    legacy = {"rope_scaling": {"type": "linear", "factor": 2.0}}
    assert decoder_checkpoint.rope(legacy) == (
        10000.0,
        {"rope_type": "linear", "factor": 2.0},
        1.0,
    )
    # Dynamic NTK scales from max_position_embeddings on; YaRN's factor
    # defaults to the ratio of the two lengths.
    dynamic = {
        "max_position_embeddings": 64,
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
    }
    assert decoder_checkpoint.rope(dynamic)[1] == {
        "rope_type": "dynamic",
        "factor": 2.0,
        "original_max_position_embeddings": 64,
    }
    yarn = {
        "max_position_embeddings": 64,
        "rope_parameters": {
            "rope_type": "yarn",
            "original_max_position_embeddings": 16,
        },
    }
    assert decoder_checkpoint.rope(yarn)[1]["factor"] == 4.0
    partial = {
        "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}
    }
    assert decoder_checkpoint.rope(partial) == (10000.0, None, 0.5)


def test_unsupported_rope_type_and_activation_are_named():
    config = hf_models.make_model("llama").config.to_dict()
    config["rope_parameters"] = {"rope_type": "ntk", "factor": 2.0, "rope_theta": 1e4}
    with pytest.raises(ValueError, match="'ntk'.*llama3"):
        llama_checkpoint.backbone_from_config(config, "LlamaForCausalLM")
    # transformers' Llama rotates whole heads: a partial rotation is refused.
    config = hf_models.make_model("llama").config.to_dict()
    config["rope_parameters"]["partial_rotary_factor"] = 0.5
    with pytest.raises(ValueError, match="partial_rotary_factor=0.5.*Phi3"):
        llama_checkpoint.backbone_from_config(config, "LlamaForCausalLM")
    config = hf_models.make_model("llama").config.to_dict()
    config["hidden_act"] = "gelu"
    with pytest.raises(ValueError, match="hidden_act='gelu'"):
        llama_checkpoint.backbone_from_config(config, "LlamaForCausalLM")


def test_save_picks_the_architecture_that_expresses_the_backbone():
    tiny = dict(
        vocabulary_size=32,
        num_layers=2,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
    )
    cases = [
        ({}, "LlamaForCausalLM"),
        (
            {"query_key_value_bias": True, "attention_output_bias": True},
            "LlamaForCausalLM",
        ),
        ({"query_key_value_bias": True}, "Qwen2ForCausalLM"),
        ({"sliding_window": 8}, "MistralForCausalLM"),
    ]
    for options, architecture in cases:
        config = llama_checkpoint.config_from_backbone(LlamaBackbone(**tiny, **options))
        assert config["architectures"] == [architecture]
    odd = LlamaBackbone(**tiny, sliding_window=8, sliding_window_layers=[1])
    with pytest.raises(ValueError, match="No Hugging Face architecture"):
        llama_checkpoint.config_from_backbone(odd)


def test_qwen2_window_layers_are_written_for_transformers_4_too():
    qwen2 = hf_models.make_model("qwen2").config.to_dict()
    backbone = llama_checkpoint.backbone_from_config(qwen2, "Qwen2ForCausalLM")
    config = llama_checkpoint.config_from_backbone(backbone)
    assert config["layer_types"] == ["full_attention", "sliding_attention"]
    assert config["max_window_layers"] == 1 and config["use_sliding_window"]
