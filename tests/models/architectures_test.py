"""The architecture registry that the family folders fill."""

import pytest

from keras_gen.models import DecoderBackbone
from keras_gen.models import architectures
from keras_gen.models.decoder_backbone import OPTIONS

FAMILIES = {
    "GPT2LMHeadModel",
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Phi3ForCausalLM",
    "Olmo2ForCausalLM",
    "MixtralForCausalLM",
    "SmolLM3ForCausalLM",
}


def test_every_family_registers_its_architectures_and_backbone():
    assert set(architectures.ARCHITECTURES) == FAMILIES
    for name in architectures.MODEL_TYPES.values():
        assert name in architectures.ARCHITECTURES
    writers = list(architectures.BACKBONES.values())
    for name, converter in architectures.ARCHITECTURES.items():
        assert converter in writers, name
        assert converter.CAUSAL_LM_CLASS.__name__.endswith("CausalLM")


def test_a_plain_decoder_backbone_names_what_save_can_write():
    backbone = DecoderBackbone(
        vocabulary_size=16,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
    )
    with pytest.raises(ValueError, match="save_pretrained. writes .*LlamaBackbone"):
        architectures.converter_for_backbone(backbone)


def test_every_backbone_option_is_in_its_config():
    config = DecoderBackbone(
        vocabulary_size=16,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
    ).get_config()
    assert set(OPTIONS) <= set(config)
