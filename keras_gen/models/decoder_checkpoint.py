"""What every decoder family's converter shares: config reading, weight names.

A family converter (`llama_checkpoint`, `gemma_checkpoint`, ...) reads its
architectures' options from `config.json` and registers itself with
`keras_gen.models.architectures`; the sizes, the rotary settings and the
weight names, which the Hugging Face checkpoints of these families spell
the same way, live here. The converter interface is the one
`gpt2_checkpoint` describes.
"""

import math

from keras_gen.layers.rotary_embedding import SCALINGS
from keras_gen.models.decoder_backbone import OPTIONS
from keras_gen.models.gpt2.gpt2_checkpoint import epsilon
from keras_gen.models.gpt2.gpt2_checkpoint import size
from keras_gen.utils.checks import check_bool
from keras_gen.utils.checks import check_positive

# Hugging Face activation names of the two gated MLPs (read), and the name
# each is written under.
WRITTEN_ACTIVATIONS = {"silu": "silu", "gelu_approximate": "gelu_pytorch_tanh"}
ACTIVATIONS = {
    "silu": "silu",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_new": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
}
# How each family names its experts: the router, the expert list and the
# gate, up and down projections of each expert.
EXPERT_NAMES = {
    "mixtral": (
        "block_sparse_moe.gate",
        "block_sparse_moe.experts",
        ("w1", "w3", "w2"),
    ),
    "qwen": ("mlp.gate", "mlp.experts", ("gate_proj", "up_proj", "down_proj")),
}


def activation(config, architecture, *keys):
    """The backbone activation for the first of `keys` the config sets."""
    name = next((config[k] for k in keys if config.get(k)), "silu")
    if name not in ACTIVATIONS:
        raise ValueError(
            f"This {architecture} checkpoint sets {keys[0]}={name!r}; keras-gen's "
            f"gated MLPs support {sorted(ACTIVATIONS)}."
        )
    return ACTIVATIONS[name]


def rope(config, parameters=None):
    """`(rope_theta, scaling or None, partial_rotary_factor)` from
    transformers 4 or 5 configs.

    `parameters`: a rope dict to read instead of the config's own (Gemma 3's
    per-layer-type entries).
    """
    # transformers 5 writes `rope_parameters`; 4.x `rope_theta` and
    # `rope_scaling`.
    if parameters is None:
        parameters = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(parameters, dict):
        raise TypeError(
            "config.json's rope_parameters / rope_scaling must be an object. "
            f"Received: {parameters!r}"
        )
    parameters = dict(parameters)
    theta = parameters.pop("rope_theta", config.get("rope_theta", 10000.0))
    theta = check_positive("config.json's rope_theta", theta)
    rope_type = parameters.pop("rope_type", parameters.pop("type", "default"))
    partial = (
        parameters.pop("partial_rotary_factor", None)
        or config.get("partial_rotary_factor")
        or 1.0
    )
    partial = check_positive("config.json's partial_rotary_factor", partial)
    if rope_type == "default":
        return theta, None, partial
    if rope_type not in SCALINGS:
        raise ValueError(
            f"Unsupported rope scaling type {rope_type!r}. keras-gen supports "
            f"{['default'] + sorted(SCALINGS)}."
        )
    if rope_type == "dynamic":
        # transformers scales from `max_position_embeddings` on.
        parameters["original_max_position_embeddings"] = config.get(
            "max_position_embeddings"
        )
    if rope_type in ("llama3", "longrope", "yarn"):
        parameters.setdefault(
            "original_max_position_embeddings",
            config.get("original_max_position_embeddings")
            or config.get("max_position_embeddings"),
        )
    if rope_type == "yarn" and parameters.get("factor") is None:
        # transformers' default: the ratio of the context lengths.
        original = parameters["original_max_position_embeddings"]
        parameters["factor"] = config["max_position_embeddings"] / original
    if rope_type == "longrope" and parameters.get("attention_factor") is None:
        # transformers' default: from the ratio of the context lengths.
        original = parameters["original_max_position_embeddings"]
        scale = parameters.get("factor") or config["max_position_embeddings"] / original
        parameters["attention_factor"] = (
            1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(original))
        )
    return theta, {"rope_type": rope_type, **parameters}, partial


# The architectures whose transformers modeling rotates only the leading
# `partial_rotary_factor` of each head; the others rotate all of it.
PARTIAL_ROTARY = {"Phi3ForCausalLM"}


def check_partial_rotary(partial, architecture):
    """A ValueError if `partial` < 1 and `architecture` rotates whole heads."""
    if partial != 1.0 and architecture not in PARTIAL_ROTARY:
        raise ValueError(
            f"This {architecture} config sets partial_rotary_factor={partial}, "
            f"but {architecture} rotates the whole head (transformers does the "
            f"same); it is read for {sorted(PARTIAL_ROTARY)}."
        )


def whole_head_rope(config, architecture, parameters=None):
    """`(rope_theta, scaling)` of a config whose heads rotate whole."""
    theta, scaling, partial = rope(config, parameters)
    check_partial_rotary(partial, architecture)
    return theta, scaling


def write_rope(backbone, config):
    """`config` with the backbone's rope scaling and partial rotation."""
    scaling = backbone.rope_scaling
    if scaling and scaling.get("rope_type") == "dynamic":
        # transformers reads the length dynamic NTK scales from as
        # `max_position_embeddings`.
        scaling = dict(scaling)
        config["max_position_embeddings"] = scaling.pop(
            "original_max_position_embeddings"
        )
    config["rope_scaling"] = scaling
    if backbone.rope_partial_rotary_factor != 1.0:
        config["partial_rotary_factor"] = backbone.rope_partial_rotary_factor
    return config


def attention_bias(config):
    """The backbone options of a config's one `attention_bias` flag."""
    bias = bool(config.get("attention_bias", False))
    return {"query_key_value_bias": bias, "attention_output_bias": bias}


def write_attention_bias(backbone, architecture, config):
    """`config["attention_bias"]`, or a ValueError if the backbone's differ."""
    if backbone.query_key_value_bias != backbone.attention_output_bias:
        raise ValueError(
            f"{architecture} has one `attention_bias` for the query/key/value "
            "and output projections; this backbone sets them apart."
        )
    config["attention_bias"] = backbone.query_key_value_bias
    return config


def layer_windows(kinds, window):
    """`(sliding_window, sliding_window_layers)` from a list of layer types."""
    layers = [i for i, kind in enumerate(kinds) if kind == "sliding_attention"]
    if window is None or not layers:
        return None, None
    return window, layers


def qwen_windows(config):
    """Qwen 2 and 3's sliding-window options: off unless `use_sliding_window`.

    transformers 4.x has no `layer_types`: it windows the layers from
    `max_window_layers` on.
    """
    window = config.get("sliding_window")
    if not config.get("use_sliding_window", False) or window is None:
        return {}
    num_layers = config["num_hidden_layers"]
    kinds = config.get("layer_types") or [
        "sliding_attention"
        if i >= config.get("max_window_layers", 28)
        else "full_attention"
        for i in range(num_layers)
    ]
    window, layers = layer_windows(kinds, window)
    return {"sliding_window": window, "sliding_window_layers": layers}


def write_qwen_windows(backbone, config):
    """The `config.json` window entries `qwen_windows` reads back."""
    config["layer_types"] = layer_types(backbone)
    windowed = [kind == "sliding_attention" for kind in config["layer_types"]]
    config["use_sliding_window"] = any(windowed)
    config["sliding_window"] = backbone.sliding_window
    # transformers 4.x has no `layer_types`: it windows the layers from
    # `max_window_layers` on.
    first = windowed.index(True) if any(windowed) else len(windowed)
    if all(windowed[first:]):
        config["max_window_layers"] = first
    return config


def sizes(config, architecture):
    """The backbone arguments every decoder config spells the same way."""
    num_heads = size(config, "num_attention_heads")
    theta, scaling, partial = rope(config)
    check_partial_rotary(partial, architecture)
    return {
        "vocabulary_size": size(config, "vocab_size"),
        "num_layers": size(config, "num_hidden_layers"),
        "num_query_heads": num_heads,
        "num_key_value_heads": size(config, "num_key_value_heads", num_heads),
        "hidden_dim": size(config, "hidden_size"),
        "intermediate_dim": size(config, "intermediate_size"),
        "head_dim": size(config, "head_dim", optional=True),
        "rope_max_wavelength": theta,
        "rope_scaling": scaling,
        "rope_partial_rotary_factor": partial,
        "layer_norm_epsilon": epsilon(config, "rms_norm_eps", 1e-6),
        "tie_word_embeddings": check_bool(
            "config.json's tie_word_embeddings",
            config.get("tie_word_embeddings", False),
        ),
        # Dynamic NTK exists to run past `max_position_embeddings`: no limit.
        "max_sequence_length": None
        if scaling and scaling["rope_type"] == "dynamic"
        else size(config, "max_position_embeddings", optional=True),
        "activation": activation(config, architecture, "hidden_act"),
    }


# The options every decoder config expresses.
COMMON_OPTIONS = {
    "head_dim",
    "rope_max_wavelength",
    "rope_scaling",
    "layer_norm_epsilon",
    "tie_word_embeddings",
    "max_sequence_length",
}


def check_options(backbone, architecture, allowed=(), fixed=None):
    """A `ValueError` when `architecture` cannot express the backbone.

    Args:
        allowed: the options, beyond `COMMON_OPTIONS`, its config holds.
        fixed: dict, options the architecture has with only these values.
    """
    fixed = fixed or {}
    odd = {
        name: getattr(backbone, name)
        for name, default in OPTIONS.items()
        if name not in COMMON_OPTIONS
        and name not in allowed
        and getattr(backbone, name) != fixed.get(name, default)
    }
    if odd:
        raise ValueError(
            f"No Hugging Face architecture has this {type(backbone).__name__}'s "
            f"options: {architecture} cannot express {odd}."
        )


def base_config(backbone, architecture, model_type):
    """The `config.json` entries every decoder family writes."""
    config = {
        "architectures": [architecture],
        "model_type": model_type,
        "vocab_size": backbone.vocabulary_size,
        "num_hidden_layers": backbone.num_layers,
        "num_attention_heads": backbone.num_query_heads,
        "num_key_value_heads": backbone.num_key_value_heads,
        "hidden_size": backbone.hidden_dim,
        "intermediate_size": backbone.intermediate_dim,
        "head_dim": backbone.head_dim,
        "hidden_act": WRITTEN_ACTIVATIONS[backbone.activation],
        "rms_norm_eps": backbone.layer_norm_epsilon,
        "rope_theta": backbone.rope_max_wavelength,
        "tie_word_embeddings": backbone.tie_word_embeddings,
    }
    if backbone.max_sequence_length is not None:
        config["max_position_embeddings"] = backbone.max_sequence_length
    return write_rope(backbone, config)


def layer_types(backbone):
    return [
        "full_attention"
        if backbone.layer_sliding_window(i) is None
        else "sliding_attention"
        for i in range(backbone.num_layers)
    ]


def _dense(layer, name):
    # torch `Linear` stores `(out, in)`: the transpose of a Keras kernel.
    weights = [(f"{name}.weight", layer._kernel, True)]
    if layer.use_bias:
        weights.append((f"{name}.bias", layer.bias, False))
    return weights


def _block_weights(block, name, experts):
    weights = [
        (f"{name}.{norm}.weight", getattr(block, norm).scale, False)
        for norm in block.norm_names
    ]
    attention = f"{name}.self_attn"
    projections = (
        ("qkv_proj",) if block.fused_projections else ("q_proj", "k_proj", "v_proj")
    )
    for projection in projections + ("o_proj",):
        weights += _dense(getattr(block, projection), f"{attention}.{projection}")
    if block.query_key_norm is not None:
        weights += [
            (f"{attention}.q_norm.weight", block.q_norm.scale, False),
            (f"{attention}.k_norm.weight", block.k_norm.scale, False),
        ]
    if block.mlp is not None:
        router, expert_list, (gate, up, down) = EXPERT_NAMES[experts]
        weights.append((f"{name}.{router}.weight", block.mlp.router._kernel, True))
        count = block.mlp.num_experts
        for projection, variable in (
            (gate, block.mlp.gate_kernel),
            (up, block.mlp.up_kernel),
            (down, block.mlp.down_kernel),
        ):
            names = tuple(
                f"{name}.{expert_list}.{j}.{projection}.weight" for j in range(count)
            )
            # One `(out, in)` tensor per expert, stacked on the first axis.
            weights.append((names, variable, True))
        return weights
    projections = (
        ("gate_up_proj",) if block.fused_projections else ("gate_proj", "up_proj")
    )
    for projection in projections + ("down_proj",):
        weights += _dense(getattr(block, projection), f"{name}.mlp.{projection}")
    return weights


def weight_map(backbone, experts="qwen"):
    """`(checkpoint name or names, variable, transposed)` for every weight.

    A tuple of names is one variable stacked from several tensors (the
    experts of a layer). `experts` picks the expert names (`EXPERT_NAMES`).
    """
    weights = [("model.embed_tokens.weight", backbone.embed_tokens.embeddings, False)]
    for i, block in enumerate(backbone.transformer_layers):
        weights += _block_weights(block, f"model.layers.{i}", experts)
    weights.append(("model.norm.weight", backbone.norm.scale, False))
    if backbone.lm_head is not None:
        weights += _dense(backbone.lm_head, "lm_head")
    return weights
