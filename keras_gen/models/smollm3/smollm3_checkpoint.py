"""Hugging Face SmolLM3 checkpoints to and from `SmolLM3Backbone`.

SmolLM3 is Llama with some layers' RoPE left out (`no_rope_layers`, one
flag per layer, 1 where the layer rotates) and, optionally, sliding
windows on those layers. The converter interface is the one
`gpt2_checkpoint` describes.
"""

import sys

from keras_gen.models import architectures
from keras_gen.models import decoder_checkpoint
from keras_gen.models.llama import llama_checkpoint
from keras_gen.models.smollm3.smollm3_backbone import SmolLM3Backbone
from keras_gen.models.smollm3.smollm3_causal_lm import SmolLM3CausalLM
from keras_gen.utils.checks import check_int

CAUSAL_LM_CLASS = SmolLM3CausalLM
ARCHITECTURE = "SmolLM3ForCausalLM"
# Llama's options, and the NoPE layers.
ALLOWED = llama_checkpoint.ALLOWED | {"no_rope_layers"}


def _no_rope_layers(config, num_layers):
    """The indices of the layers without RoPE."""
    flags = config.get("no_rope_layers")
    if flags is None:
        # transformers' default: every `no_rope_layer_interval`-th layer.
        interval = check_int(
            "config.json's no_rope_layer_interval",
            config.get("no_rope_layer_interval", 4),
            low=1,
        )
        return [i for i in range(num_layers) if (i + 1) % interval == 0]
    if (
        not isinstance(flags, list)
        or len(flags) != num_layers
        or any(flag not in (0, 1) for flag in flags)
    ):
        raise ValueError(
            "config.json's no_rope_layers must hold one 0 or 1 per layer "
            f"({num_layers}). Received: {flags!r}"
        )
    return [i for i, flag in enumerate(flags) if not flag]


def backbone_from_config(config, architecture, dtype=None):
    sizes = decoder_checkpoint.sizes(config, architecture)  # checked first
    num_layers = sizes["num_layers"]
    no_rope = _no_rope_layers(config, num_layers)
    windows = {}
    if config.get("use_sliding_window") and config.get("sliding_window") is not None:
        # transformers' default layer types: the NoPE layers are windowed.
        kinds = config.get("layer_types") or [
            "sliding_attention" if i in no_rope else "full_attention"
            for i in range(num_layers)
        ]
        window, layers = decoder_checkpoint.layer_windows(
            kinds, config["sliding_window"]
        )
        windows = {"sliding_window": window, "sliding_window_layers": layers}
    return SmolLM3Backbone(
        **sizes,
        **decoder_checkpoint.attention_bias(config),
        mlp_bias=bool(config.get("mlp_bias", False)),
        no_rope_layers=no_rope,
        **windows,
        dtype=dtype,
    )


def config_from_backbone(backbone):
    decoder_checkpoint.check_options(backbone, ARCHITECTURE, ALLOWED)
    config = decoder_checkpoint.base_config(backbone, ARCHITECTURE, "smollm3")
    decoder_checkpoint.write_attention_bias(backbone, ARCHITECTURE, config)
    no_rope = backbone.no_rope_layers or []
    config["mlp_bias"] = backbone.mlp_bias
    config["no_rope_layers"] = [
        int(i not in no_rope) for i in range(backbone.num_layers)
    ]
    config["layer_types"] = decoder_checkpoint.layer_types(backbone)
    config["use_sliding_window"] = backbone.sliding_window is not None
    config["sliding_window"] = backbone.sliding_window
    return config


weight_map = decoder_checkpoint.weight_map


architectures.register(
    sys.modules[__name__], {ARCHITECTURE: "smollm3"}, SmolLM3Backbone
)
