"""Hugging Face OLMo 2 checkpoints to and from `Olmo2Backbone`.

The converter interface is the one `gpt2_checkpoint` describes.
"""

import sys

from keras_gen.models import architectures
from keras_gen.models import decoder_checkpoint
from keras_gen.models.olmo2.olmo2_backbone import Olmo2Backbone
from keras_gen.models.olmo2.olmo2_causal_lm import Olmo2CausalLM

CAUSAL_LM_CLASS = Olmo2CausalLM
ARCHITECTURE = "Olmo2ForCausalLM"
FIXED = {"norm_placement": "post", "query_key_norm": "projection"}


def backbone_from_config(config, architecture, dtype=None):
    return Olmo2Backbone(
        **decoder_checkpoint.sizes(config, architecture),
        **decoder_checkpoint.attention_bias(config),
        dtype=dtype,
    )


def config_from_backbone(backbone):
    decoder_checkpoint.check_options(
        backbone,
        ARCHITECTURE,
        {"query_key_value_bias", "attention_output_bias"},
        fixed=FIXED,
    )
    config = decoder_checkpoint.base_config(backbone, ARCHITECTURE, "olmo2")
    return decoder_checkpoint.write_attention_bias(backbone, ARCHITECTURE, config)


weight_map = decoder_checkpoint.weight_map


architectures.register(sys.modules[__name__], {ARCHITECTURE: "olmo2"}, Olmo2Backbone)
