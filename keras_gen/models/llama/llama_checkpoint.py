"""Hugging Face Llama, Mistral and Qwen2 checkpoints to and from `LlamaBackbone`.

The three differ only in options of one backbone: which projections have
biases and which layers attend through a sliding window. Each
architecture's reader of those options is one entry of `OPTIONS`. The
converter interface is the one `gpt2_checkpoint` describes.
"""

import sys

from keras_gen.models import architectures
from keras_gen.models import decoder_checkpoint
from keras_gen.models.llama.llama_backbone import LlamaBackbone
from keras_gen.models.llama.llama_causal_lm import LlamaCausalLM

CAUSAL_LM_CLASS = LlamaCausalLM


def _llama_options(config):
    return {
        **decoder_checkpoint.attention_bias(config),
        "mlp_bias": bool(config.get("mlp_bias", False)),
    }


def _mistral_options(config):
    return {"sliding_window": config.get("sliding_window")}


def _qwen2_options(config):
    return {"query_key_value_bias": True, **decoder_checkpoint.qwen_windows(config)}


# Architecture -> (model_type, reader of its backbone options).
OPTIONS = {
    "LlamaForCausalLM": ("llama", _llama_options),
    "MistralForCausalLM": ("mistral", _mistral_options),
    "Qwen2ForCausalLM": ("qwen2", _qwen2_options),
}


def backbone_from_config(config, architecture, dtype=None):
    _, read_options = OPTIONS[architecture]
    kwargs = decoder_checkpoint.sizes(config, architecture)
    if kwargs["activation"] != "silu":
        raise ValueError(
            f"This {architecture} checkpoint sets hidden_act="
            f"{config.get('hidden_act')!r}; keras-gen's LlamaBackbone supports "
            "'silu' (SwiGLU) only."
        )
    return LlamaBackbone(**kwargs, dtype=dtype, **read_options(config))


# The options a Llama-family config expresses beyond the common ones.
ALLOWED = {
    "query_key_value_bias",
    "attention_output_bias",
    "mlp_bias",
    "sliding_window",
    "sliding_window_layers",
}


def _architecture_of(backbone):
    """The Hugging Face architecture that expresses this backbone."""
    decoder_checkpoint.check_options(backbone, "LlamaForCausalLM", ALLOWED)
    qkv, output, mlp = (
        backbone.query_key_value_bias,
        backbone.attention_output_bias,
        backbone.mlp_bias,
    )
    window = backbone.sliding_window
    if qkv and not output and not mlp:
        return "Qwen2ForCausalLM"
    if window is None and qkv == output:
        return "LlamaForCausalLM"
    if backbone.sliding_window_layers is None and not (qkv or output or mlp):
        return "MistralForCausalLM"
    raise ValueError(
        "No Hugging Face architecture has this LlamaBackbone's options "
        f"(query_key_value_bias={qkv}, attention_output_bias={output}, "
        f"mlp_bias={mlp}, sliding_window={window}, "
        f"sliding_window_layers={backbone.sliding_window_layers})."
    )


def config_from_backbone(backbone):
    architecture = _architecture_of(backbone)
    config = decoder_checkpoint.base_config(
        backbone, architecture, OPTIONS[architecture][0]
    )
    if architecture == "LlamaForCausalLM":
        decoder_checkpoint.write_attention_bias(backbone, architecture, config)
        config["mlp_bias"] = backbone.mlp_bias
    elif architecture == "MistralForCausalLM":
        config["sliding_window"] = backbone.sliding_window
    else:
        decoder_checkpoint.write_qwen_windows(backbone, config)
    return config


weight_map = decoder_checkpoint.weight_map


architectures.register(
    sys.modules[__name__],
    {name: model_type for name, (model_type, _) in OPTIONS.items()},
    LlamaBackbone,
)
