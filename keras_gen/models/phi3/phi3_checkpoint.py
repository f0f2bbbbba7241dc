"""Hugging Face Phi-3 checkpoints to and from `Phi3Backbone`.

Phi-3 fuses the query/key/value and the gate/up projections into one
matrix each, as `Phi3Backbone` does; its 128k variants use LongRoPE. The
converter interface is the one `gpt2_checkpoint` describes.
"""

import sys

from keras_gen.models import architectures
from keras_gen.models import decoder_checkpoint
from keras_gen.models.phi3.phi3_backbone import Phi3Backbone
from keras_gen.models.phi3.phi3_causal_lm import Phi3CausalLM

CAUSAL_LM_CLASS = Phi3CausalLM
ARCHITECTURE = "Phi3ForCausalLM"


def backbone_from_config(config, architecture, dtype=None):
    parameters = config.get("rope_parameters") or config.get("rope_scaling")
    if isinstance(parameters, dict) and parameters.get(
        "rope_type", parameters.get("type")
    ) in ("su", "yarn"):
        # transformers reads Phi-3's older names for LongRoPE as LongRoPE.
        parameters = {k: v for k, v in parameters.items() if k != "type"}
        config = {**config, "rope_parameters": {**parameters, "rope_type": "longrope"}}
    return Phi3Backbone(
        **decoder_checkpoint.sizes(config, architecture),
        sliding_window=config.get("sliding_window"),
        dtype=dtype,
    )


def config_from_backbone(backbone):
    decoder_checkpoint.check_options(
        backbone,
        ARCHITECTURE,
        {"sliding_window", "rope_partial_rotary_factor"},
        fixed={"fused_projections": True},
    )
    config = decoder_checkpoint.base_config(backbone, ARCHITECTURE, "phi3")
    config["sliding_window"] = backbone.sliding_window
    scaling = backbone.rope_scaling or {}
    if "original_max_position_embeddings" in scaling:
        config["original_max_position_embeddings"] = scaling[
            "original_max_position_embeddings"
        ]
    return config


weight_map = decoder_checkpoint.weight_map


architectures.register(sys.modules[__name__], {ARCHITECTURE: "phi3"}, Phi3Backbone)
