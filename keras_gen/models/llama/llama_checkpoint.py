"""Hugging Face Llama, Mistral and Qwen2 checkpoints to and from `LlamaBackbone`.

The three differ only in options of one backbone: which projections have
biases and which layers attend through a sliding window. Each
architecture's reader of those options is one entry of `OPTIONS`. The
converter interface is the one `gpt2_checkpoint` describes.
"""

from keras_gen.layers.rotary_embedding import SCALINGS
from keras_gen.models.gpt2.gpt2_checkpoint import size
from keras_gen.models.llama.llama_backbone import LlamaBackbone
from keras_gen.models.llama.llama_causal_lm import LlamaCausalLM

CAUSAL_LM_CLASS = LlamaCausalLM


def _llama_options(config):
    bias = bool(config.get("attention_bias", False))
    return {
        "query_key_value_bias": bias,
        "attention_output_bias": bias,
        "mlp_bias": bool(config.get("mlp_bias", False)),
    }


def _mistral_options(config):
    return {"sliding_window": config.get("sliding_window")}


def _qwen2_options(config):
    options = {"query_key_value_bias": True}
    window = config.get("sliding_window")
    if not config.get("use_sliding_window", False) or window is None:
        return options
    num_layers = config["num_hidden_layers"]
    layer_types = config.get("layer_types") or [
        "sliding_attention"
        if i >= config.get("max_window_layers", 28)
        else "full_attention"
        for i in range(num_layers)
    ]
    options["sliding_window"] = window
    options["sliding_window_layers"] = [
        i for i, kind in enumerate(layer_types) if kind == "sliding_attention"
    ]
    return options


# Architecture -> (model_type, reader of its backbone options).
OPTIONS = {
    "LlamaForCausalLM": ("llama", _llama_options),
    "MistralForCausalLM": ("mistral", _mistral_options),
    "Qwen2ForCausalLM": ("qwen2", _qwen2_options),
}


def _rope(config):
    """`(rope_theta, scaling or None)` from transformers 4 or 5 configs."""
    # transformers 5 writes `rope_parameters`; 4.x `rope_theta` and
    # `rope_scaling`.
    parameters = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    theta = parameters.pop("rope_theta", config.get("rope_theta", 10000.0))
    rope_type = parameters.pop("rope_type", parameters.pop("type", "default"))
    factor = parameters.pop("partial_rotary_factor", None) or config.get(
        "partial_rotary_factor", 1.0
    )
    if factor != 1.0:
        raise ValueError(
            f"partial_rotary_factor={factor} is not supported; keras-gen "
            "rotates the whole head."
        )
    if rope_type == "default":
        return theta, None
    if rope_type not in SCALINGS:
        raise ValueError(
            f"Unsupported rope scaling type {rope_type!r}. keras-gen supports "
            f"{['default'] + sorted(SCALINGS)}."
        )
    if rope_type == "llama3":
        parameters.setdefault(
            "original_max_position_embeddings", config.get("max_position_embeddings")
        )
    return theta, {"rope_type": rope_type, **parameters}


def backbone_from_config(config, architecture, dtype=None):
    model_type, read_options = OPTIONS[architecture]
    activation = config.get("hidden_act", "silu")
    if activation != "silu":
        raise ValueError(
            f"This {architecture} checkpoint sets hidden_act={activation!r}; "
            "keras-gen's LlamaBackbone supports 'silu' (SwiGLU) only."
        )
    theta, scaling = _rope(config)
    num_heads = size(config, "num_attention_heads")
    return LlamaBackbone(
        vocabulary_size=size(config, "vocab_size"),
        num_layers=size(config, "num_hidden_layers"),
        num_query_heads=num_heads,
        num_key_value_heads=size(config, "num_key_value_heads", num_heads),
        hidden_dim=size(config, "hidden_size"),
        intermediate_dim=size(config, "intermediate_size"),
        head_dim=size(config, "head_dim", optional=True),
        rope_max_wavelength=theta,
        rope_scaling=scaling,
        layer_norm_epsilon=config.get("rms_norm_eps", 1e-6),
        tie_word_embeddings=config.get("tie_word_embeddings", False),
        max_sequence_length=size(config, "max_position_embeddings", optional=True),
        dtype=dtype,
        **read_options(config),
    )


def _architecture_of(backbone):
    """The Hugging Face architecture that expresses this backbone."""
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
    config = {
        "architectures": [architecture],
        "model_type": OPTIONS[architecture][0],
        "vocab_size": backbone.vocabulary_size,
        "num_hidden_layers": backbone.num_layers,
        "num_attention_heads": backbone.num_query_heads,
        "num_key_value_heads": backbone.num_key_value_heads,
        "hidden_size": backbone.hidden_dim,
        "intermediate_size": backbone.intermediate_dim,
        "head_dim": backbone.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": backbone.layer_norm_epsilon,
        "rope_theta": backbone.rope_max_wavelength,
        "rope_scaling": backbone.rope_scaling,
        "tie_word_embeddings": backbone.tie_word_embeddings,
    }
    if backbone.max_sequence_length is not None:
        config["max_position_embeddings"] = backbone.max_sequence_length
    if architecture == "LlamaForCausalLM":
        config["attention_bias"] = backbone.query_key_value_bias
        config["mlp_bias"] = backbone.mlp_bias
    elif architecture == "MistralForCausalLM":
        config["sliding_window"] = backbone.sliding_window
    else:
        windowed = [
            backbone.layer_sliding_window(i) is not None
            for i in range(backbone.num_layers)
        ]
        config["use_sliding_window"] = any(windowed)
        config["sliding_window"] = backbone.sliding_window
        config["layer_types"] = [
            "sliding_attention" if w else "full_attention" for w in windowed
        ]
        # transformers 4.x has no `layer_types`: it windows the layers from
        # `max_window_layers` on.
        first = windowed.index(True) if any(windowed) else len(windowed)
        if all(windowed[first:]):
            config["max_window_layers"] = first
    return config


def _dense(layer, name):
    # torch `Linear` stores `(out, in)`: the transpose of a Keras kernel.
    weights = [(f"{name}.weight", layer.kernel, True)]
    if layer.use_bias:
        weights.append((f"{name}.bias", layer.bias, False))
    return weights


def weight_map(backbone):
    weights = [("model.embed_tokens.weight", backbone.embed_tokens.embeddings, False)]
    for i, block in enumerate(backbone.transformer_layers):
        name = f"model.layers.{i}"
        weights.append(
            (f"{name}.input_layernorm.weight", block.input_layernorm.scale, False)
        )
        for projection in ("q_proj", "k_proj", "v_proj", "o_proj"):
            weights += _dense(
                getattr(block, projection), f"{name}.self_attn.{projection}"
            )
        weights.append(
            (
                f"{name}.post_attention_layernorm.weight",
                block.post_attention_layernorm.scale,
                False,
            )
        )
        for projection in ("gate_proj", "up_proj", "down_proj"):
            weights += _dense(getattr(block, projection), f"{name}.mlp.{projection}")
    weights.append(("model.norm.weight", backbone.norm.scale, False))
    if backbone.lm_head is not None:
        weights += _dense(backbone.lm_head, "lm_head")
    return weights


def load_weights(backbone, reader):
    reader.load_all(weight_map(backbone))
