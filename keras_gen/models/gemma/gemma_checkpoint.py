"""Hugging Face Gemma, Gemma 2 and Gemma 3 (text) checkpoints to and from
`GemmaBackbone`.

The three are one backbone with more options each: Gemma 2 adds
sandwich norms, soft-capping, alternating sliding windows and
`query_pre_attn_scalar`; Gemma 3 drops the soft-caps for query/key norms
and rotates its sliding-window layers with a second rope base. The
converter interface is the one `gpt2_checkpoint` describes.
"""

import sys

from keras_gen.models import architectures
from keras_gen.models import decoder_checkpoint
from keras_gen.models.gemma.gemma_backbone import GemmaBackbone
from keras_gen.models.gemma.gemma_causal_lm import GemmaCausalLM

CAUSAL_LM_CLASS = GemmaCausalLM
MODEL_TYPES = {
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
}
# The options each architecture's config expresses beyond the common ones.
ALLOWED = {
    "GemmaForCausalLM": set(),
    "Gemma2ForCausalLM": {
        "norm_placement",
        "query_pre_attention_scalar",
        "attention_logit_softcap",
        "final_logit_softcap",
        "sliding_window",
        "sliding_window_layers",
    },
    "Gemma3ForCausalLM": {
        "norm_placement",
        "query_key_norm",
        "query_pre_attention_scalar",
        "attention_logit_softcap",
        "final_logit_softcap",
        "sliding_window",
        "sliding_window_layers",
        "local_rope_max_wavelength",
    },
}
FIXED = {
    "activation": "gelu_approximate",
    "norm_unit_offset": True,
    "scale_embeddings": True,
}


def _activation(config, architecture):
    # Gemma's official configs say "gelu" and mean the tanh approximation
    # (transformers reads them so too).
    keys = ("hidden_activation", "hidden_act")
    config = {
        k: "gelu_pytorch_tanh" if config.get(k) == "gelu" else config.get(k)
        for k in keys
    }
    return decoder_checkpoint.activation(config, architecture, *keys)


def _gemma3_rope(config, architecture):
    """`(global theta, global scaling, local theta)` of a Gemma 3 config."""
    parameters = config.get("rope_parameters") or {}
    if "full_attention" in parameters:
        # transformers 5: one rope entry per layer type.
        theta, scaling = decoder_checkpoint.whole_head_rope(
            config, architecture, parameters["full_attention"]
        )
        local = parameters.get("sliding_attention", {})
        local_theta, local_scaling = decoder_checkpoint.whole_head_rope(
            config, architecture, local
        )
        if local_scaling is not None:
            raise ValueError(
                f"This {architecture} checkpoint scales the rope of its "
                "sliding-window layers; keras-gen scales only the global layers'."
            )
        return theta, scaling, local_theta
    theta, scaling = decoder_checkpoint.whole_head_rope(config, architecture)
    return theta, scaling, config.get("rope_local_base_freq", 10000.0)


def backbone_from_config(config, architecture, dtype=None):
    if config.get("use_bidirectional_attention"):
        raise ValueError(
            f"This {architecture} checkpoint attends bidirectionally "
            "(an embedding model); keras-gen generates with causal models."
        )
    kwargs = {
        **decoder_checkpoint.sizes(config, architecture),
        "activation": _activation(config, architecture),
        "tie_word_embeddings": config.get("tie_word_embeddings", True),
    }
    if architecture == "GemmaForCausalLM":
        return GemmaBackbone(**kwargs, dtype=dtype)
    num_layers = config["num_hidden_layers"]
    if architecture == "Gemma2ForCausalLM":
        # Gemma 2 alternates: sliding window first.
        pattern = 2
    else:
        pattern = config.get("sliding_window_pattern", 6)
        theta, scaling, local_theta = _gemma3_rope(config, architecture)
        kwargs.update(
            rope_max_wavelength=theta,
            rope_scaling=scaling,
            local_rope_max_wavelength=local_theta,
            query_key_norm="head",
        )
    kinds = config.get("layer_types") or [
        "sliding_attention" if (i + 1) % pattern else "full_attention"
        for i in range(num_layers)
    ]
    window, layers = decoder_checkpoint.layer_windows(
        kinds, config.get("sliding_window")
    )
    return GemmaBackbone(
        **kwargs,
        norm_placement="sandwich",
        query_pre_attention_scalar=config.get("query_pre_attn_scalar"),
        attention_logit_softcap=config.get("attn_logit_softcapping"),
        final_logit_softcap=config.get("final_logit_softcapping"),
        sliding_window=window,
        sliding_window_layers=layers,
        dtype=dtype,
    )


def _architecture_of(backbone):
    if backbone.query_key_norm is not None or backbone.local_rope_max_wavelength:
        return "Gemma3ForCausalLM"
    if backbone.norm_placement == "sandwich":
        return "Gemma2ForCausalLM"
    return "GemmaForCausalLM"


def config_from_backbone(backbone):
    architecture = _architecture_of(backbone)
    fixed = dict(FIXED)
    if architecture != "GemmaForCausalLM":
        fixed["norm_placement"] = "sandwich"
    if architecture == "Gemma3ForCausalLM":
        fixed["query_key_norm"] = "head"
    allowed = ALLOWED[architecture] - set(fixed)
    decoder_checkpoint.check_options(backbone, architecture, allowed, fixed=fixed)
    config = decoder_checkpoint.base_config(
        backbone, architecture, MODEL_TYPES[architecture]
    )
    config["hidden_activation"] = config["hidden_act"]
    if architecture == "GemmaForCausalLM":
        return config
    config.update(
        query_pre_attn_scalar=backbone.query_pre_attention_scalar or backbone.head_dim,
        attn_logit_softcapping=backbone.attention_logit_softcap,
        final_logit_softcapping=backbone.final_logit_softcap,
        sliding_window=backbone.sliding_window,
        layer_types=decoder_checkpoint.layer_types(backbone),
    )
    if architecture == "Gemma3ForCausalLM":
        local = backbone.local_rope_max_wavelength or backbone.rope_max_wavelength
        config.pop("rope_theta")
        config.pop("rope_scaling")
        config["rope_parameters"] = {
            "full_attention": {
                "rope_type": "default",
                "rope_theta": backbone.rope_max_wavelength,
                **(backbone.rope_scaling or {}),
            },
            "sliding_attention": {"rope_type": "default", "rope_theta": local},
        }
    return config


weight_map = decoder_checkpoint.weight_map


architectures.register(sys.modules[__name__], MODEL_TYPES, GemmaBackbone)
