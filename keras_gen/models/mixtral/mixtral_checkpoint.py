"""Hugging Face Mixtral checkpoints to and from `MixtralBackbone`.

The converter interface is the one `gpt2_checkpoint` describes.
"""

import sys

from keras_gen.models import architectures
from keras_gen.models import decoder_checkpoint
from keras_gen.models.mixtral.mixtral_backbone import MixtralBackbone
from keras_gen.models.mixtral.mixtral_causal_lm import MixtralCausalLM

CAUSAL_LM_CLASS = MixtralCausalLM
ARCHITECTURE = "MixtralForCausalLM"


def backbone_from_config(config, architecture, dtype=None):
    return MixtralBackbone(
        **decoder_checkpoint.sizes(config, architecture),
        sliding_window=config.get("sliding_window"),
        num_experts=config.get("num_local_experts", 8),
        num_experts_per_token=config.get("num_experts_per_tok", 2),
        dtype=dtype,
    )


def config_from_backbone(backbone):
    decoder_checkpoint.check_options(
        backbone,
        ARCHITECTURE,
        {"sliding_window", "num_experts", "num_experts_per_token"},
    )
    if backbone.num_experts is None:
        raise ValueError(f"{ARCHITECTURE} routes to experts; this backbone has none.")
    config = decoder_checkpoint.base_config(backbone, ARCHITECTURE, "mixtral")
    config.update(
        sliding_window=backbone.sliding_window,
        num_local_experts=backbone.num_experts,
        num_experts_per_tok=backbone.num_experts_per_token,
    )
    return config


def weight_map(backbone):
    return decoder_checkpoint.weight_map(backbone, experts="mixtral")


architectures.register(
    sys.modules[__name__], {ARCHITECTURE: "mixtral"}, MixtralBackbone
)
