"""How each keras-hub causal LM family is spelled in Hugging Face's terms.

A family is its `config.json` (from and to the keras-hub backbone's
config) and a table of weights: each keras-hub variable path (`{i}` a
layer, `{n}` Keras' numbering of a repeated layer name, the rest literal)
names the Hugging Face tensor it is (`{e}` an expert), and the
`Layout` that turns one into the other. `keras_hub_conversion` reads the
tables both ways; keras-gen's own family converters then take the
Hugging Face form, as `from_pretrained` does.
"""

import collections

import numpy as np


class Layout:
    """A keras-hub variable's layout against its Hugging Face tensor.

    `to_hf(array)` and `from_hf(array, shape)` reshape and transpose;
    `out_axis` is the Hugging Face axis of the outputs, along which fused
    tensors (GPT-2's `c_attn`, Phi-3's `qkv_proj`) join their parts.
    """

    def __init__(self, to_hf, from_hf, out_axis):
        self.to_hf = to_hf
        self.from_hf = from_hf
        self.out_axis = out_axis


def _reshaped(array, shape):
    return array.reshape(shape)


def _transposed_back(array, shape):
    return np.swapaxes(array, -1, -2).reshape(shape)


# Embeddings and norms: the same array.
SAME = Layout(lambda a: a, _reshaped, -1)
# A bias over heads: flat.
FLAT = Layout(lambda a: a.reshape(-1), _reshaped, -1)
# A kernel `(in, *out)` as a torch `Linear` `(out, in)`.
LINEAR = Layout(lambda a: a.reshape(a.shape[0], -1).T, _transposed_back, -2)
# A kernel `(*in, out)` (an attention output over heads) as a `Linear`.
LINEAR_OUT = Layout(lambda a: a.reshape(-1, a.shape[-1]).T, _transposed_back, -2)
# A kernel `(in, *out)` as transformers' GPT-2 `Conv1D` `(in, out)`.
CONV1D = Layout(lambda a: a.reshape(a.shape[0], -1), _reshaped, -1)
CONV1D_OUT = Layout(lambda a: a.reshape(-1, a.shape[-1]), _reshaped, -1)
# Gemma's projections `(heads, in, head_dim)` as a `Linear`.
HEADS_LINEAR = Layout(
    lambda a: a.transpose(1, 0, 2).reshape(a.shape[1], -1).T,
    lambda h, shape: h.T.reshape(shape[1], shape[0], shape[2]).transpose(1, 0, 2),
    -2,
)
# Stacked experts `(experts, in, out)`: one `Linear` per expert (`{e}`).
EXPERTS = Layout(lambda a: a.transpose(0, 2, 1), _transposed_back, -2)

# One part of a fused Hugging Face tensor, in order.
Part = collections.namedtuple("Part", ["name", "index"])
# One keras-hub variable holding several Hugging Face tensors, in order.
Split = collections.namedtuple("Split", ["names"])

Family = collections.namedtuple(
    "Family", ["architecture", "hf_config", "keras_hub_config", "weights"]
)

EMBEDDING = {"token_embedding/embeddings": ("model.embed_tokens.weight", SAME)}
LM_HEAD = {"token_embedding/reverse_embeddings": ("lm_head.weight", LINEAR)}


def _llama_block():
    """The table of the Llama-like families (their optional biases and
    query/key norms included: a rule no variable matches is unused)."""
    block, layer = "transformer_layer_{i}", "model.layers.{i}"
    a, hf = f"{block}/self_attention", f"{layer}.self_attn"
    return {
        f"{a}/query/kernel": (f"{hf}.q_proj.weight", LINEAR),
        f"{a}/key/kernel": (f"{hf}.k_proj.weight", LINEAR),
        f"{a}/value/kernel": (f"{hf}.v_proj.weight", LINEAR),
        f"{a}/query/bias": (f"{hf}.q_proj.bias", FLAT),
        f"{a}/key/bias": (f"{hf}.k_proj.bias", FLAT),
        f"{a}/value/bias": (f"{hf}.v_proj.bias", FLAT),
        f"{a}/attention_output/kernel": (f"{hf}.o_proj.weight", LINEAR_OUT),
        f"{a}/query_dense_layernorm/scale": (f"{hf}.q_norm.weight", SAME),
        f"{a}/key_dense_layernorm/scale": (f"{hf}.k_norm.weight", SAME),
        f"{block}/self_attention_layernorm/scale": (
            f"{layer}.input_layernorm.weight",
            SAME,
        ),
        f"{block}/feedforward_layernorm/scale": (
            f"{layer}.post_attention_layernorm.weight",
            SAME,
        ),
        f"{block}/feedforward_gate_dense/kernel": (
            f"{layer}.mlp.gate_proj.weight",
            LINEAR,
        ),
        f"{block}/feedforward_intermediate_dense/kernel": (
            f"{layer}.mlp.up_proj.weight",
            LINEAR,
        ),
        f"{block}/feedforward_output_dense/kernel": (
            f"{layer}.mlp.down_proj.weight",
            LINEAR,
        ),
        "sequence_output_layernorm/scale": ("model.norm.weight", SAME),
        **EMBEDDING,
        **LM_HEAD,
    }


def _sizes(config):
    """The sizes every decoder config shares, keras-hub to transformers."""
    return {
        "vocab_size": config["vocabulary_size"],
        "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_query_heads"],
        "num_key_value_heads": config["num_key_value_heads"],
        "hidden_size": config["hidden_dim"],
        "intermediate_size": config["intermediate_dim"],
        "rms_norm_eps": config["layer_norm_epsilon"],
        "rope_theta": config.get("rope_max_wavelength", 10000.0),
        "hidden_act": "silu",
    }


def _keras_hub_sizes(config):
    """`_sizes` back: transformers to keras-hub."""
    return {
        "vocabulary_size": config["vocab_size"],
        "num_layers": config["num_hidden_layers"],
        "num_query_heads": config["num_attention_heads"],
        "num_key_value_heads": config["num_key_value_heads"],
        "hidden_dim": config["hidden_size"],
        "intermediate_dim": config["intermediate_size"],
        "layer_norm_epsilon": config["rms_norm_eps"],
        "rope_max_wavelength": config.get("rope_theta", 10000.0),
    }


def _linear_scaling(factor):
    """A keras-hub rope scaling factor as transformers' `rope_scaling`."""
    return None if factor == 1.0 else {"rope_type": "linear", "factor": factor}


def _linear_factor(config, family):
    """transformers' `rope_scaling` as a keras-hub linear factor."""
    scaling = config.get("rope_scaling")
    if not scaling:
        return 1.0
    if scaling.get("rope_type") != "linear":
        raise ValueError(
            f"keras-hub's {family} takes linear rope scaling only; this model "
            f"has {scaling}."
        )
    return scaling["factor"]


def _no_options(config, family, **options):
    """A ValueError naming the options keras-hub's `family` cannot hold."""
    odd = {k: config.get(k) for k, v in options.items() if config.get(k, v) != v}
    if odd:
        raise ValueError(f"keras-hub's {family} cannot express {odd}.")


def _llama_config(config):
    scaling = None
    if config.get("rope_frequency_adjustment_factor") is not None:
        scaling = {
            "rope_type": "llama3",
            "factor": config["rope_frequency_adjustment_factor"],
            "low_freq_factor": config["rope_low_freq_factor"],
            "high_freq_factor": config["rope_high_freq_factor"],
            "original_max_position_embeddings": config[
                "rope_pretraining_sequence_length"
            ],
        }
    # keras-hub 0.32's Llama rotary embedding never reads
    # `rope_position_scaling_factor`: as keras-hub computes, it is left out.
    return {
        **_sizes(config),
        "rope_scaling": scaling,
        "tie_word_embeddings": config.get("tie_word_embeddings", False),
    }


def _keras_hub_llama_config(config):
    _no_options(config, "LlamaBackbone", attention_bias=False, mlp_bias=False)
    _no_options(config, "LlamaBackbone", sliding_window=None)
    scaling = config.get("rope_scaling") or {}
    options = {}
    if scaling.get("rope_type") == "llama3":
        options = {
            "rope_frequency_adjustment_factor": scaling["factor"],
            "rope_low_freq_factor": scaling["low_freq_factor"],
            "rope_high_freq_factor": scaling["high_freq_factor"],
            "rope_pretraining_sequence_length": scaling[
                "original_max_position_embeddings"
            ],
        }
    elif scaling:
        raise ValueError(
            "keras-hub 0.32's LlamaBackbone scales its rope as Llama 3 does "
            f"or not at all; this model has {scaling}."
        )
    return {
        **_keras_hub_sizes(config),
        **options,
        "tie_word_embeddings": config["tie_word_embeddings"],
    }


def _mistral_config(config):
    return {
        **_sizes(config),
        "head_dim": config.get("head_dim"),
        "rope_scaling": _linear_scaling(config.get("rope_scaling_factor", 1.0)),
        "sliding_window": config.get("sliding_window"),
        "tie_word_embeddings": False,
    }


def _keras_hub_mistral_config(config):
    _no_options(config, "MistralBackbone", tie_word_embeddings=False)
    return {
        **_keras_hub_sizes(config),
        "head_dim": config.get("head_dim"),
        "rope_scaling_factor": _linear_factor(config, "MistralBackbone"),
        "sliding_window": config.get("sliding_window"),
    }


def _mixtral_config(config):
    return {
        **_mistral_config(config),
        "num_local_experts": config["num_experts"],
        "num_experts_per_tok": config["top_k"],
    }


def _keras_hub_mixtral_config(config):
    hub = _keras_hub_mistral_config(config)
    head_dim = hub.pop("head_dim")
    if head_dim not in (None, config["hidden_size"] // config["num_attention_heads"]):
        raise ValueError(
            "keras-hub's MixtralBackbone has heads of hidden_size / heads; this "
            f"model's head_dim is {head_dim}."
        )
    return {
        **hub,
        "num_experts": config["num_local_experts"],
        "top_k": config["num_experts_per_tok"],
    }


def _qwen_windows(config, windowed):
    """transformers' Qwen window settings: every layer windowed, or none."""
    return {
        "use_sliding_window": windowed,
        "sliding_window": config.get("sliding_window_size") if windowed else None,
        "max_window_layers": 0,
    }


def _keras_hub_windows(config, family):
    """`_qwen_windows` back: `(windowed, size)`."""
    kinds = set(config.get("layer_types") or ["full_attention"])
    if len(kinds) > 1:
        raise ValueError(
            f"keras-hub's {family} windows every layer or none; this model "
            f"mixes {sorted(kinds)}."
        )
    windowed = config.get("use_sliding_window", False) and "sliding_attention" in kinds
    return windowed, config.get("sliding_window") or 32768


def _qwen_config(config):
    return {
        **_sizes(config),
        "rope_scaling": _linear_scaling(config.get("rope_scaling_factor", 1.0)),
        "tie_word_embeddings": config.get("tie_word_embeddings", True),
        **_qwen_windows(config, config.get("use_sliding_window_attention", False)),
    }


def _keras_hub_qwen_config(config):
    windowed, size = _keras_hub_windows(config, "QwenBackbone")
    return {
        **_keras_hub_sizes(config),
        "rope_scaling_factor": _linear_factor(config, "QwenBackbone"),
        "tie_word_embeddings": config["tie_word_embeddings"],
        "use_sliding_window_attention": windowed,
        "sliding_window_size": size,
    }


def _qwen3_config(config):
    # keras-hub's Qwen3 windows every layer whenever its size is set.
    return {
        **_sizes(config),
        "head_dim": config["head_dim"],
        "rope_scaling": _linear_scaling(config.get("rope_scaling_factor", 1.0)),
        "tie_word_embeddings": config.get("tie_word_embeddings", True),
        **_qwen_windows(config, bool(config.get("sliding_window_size"))),
    }


def _keras_hub_qwen3_config(config):
    windowed, size = _keras_hub_windows(config, "Qwen3Backbone")
    return {
        **_keras_hub_sizes(config),
        "head_dim": config["head_dim"],
        "rope_scaling_factor": _linear_factor(config, "Qwen3Backbone"),
        "tie_word_embeddings": config["tie_word_embeddings"],
        "sliding_window_size": size if windowed else None,
    }


def _qwen3_moe_config(config):
    return {
        **_qwen3_config(config),
        "num_experts": config["num_experts"],
        "num_experts_per_tok": config["top_k"],
        "moe_intermediate_size": config["moe_intermediate_dim"],
        "norm_topk_prob": config.get("norm_top_k_prob", False),
        "decoder_sparse_step": config.get("decoder_sparse_step", 1),
        "mlp_only_layers": list(config.get("mlp_only_layers") or []),
    }


def _keras_hub_qwen3_moe_config(config):
    return {
        **_keras_hub_qwen3_config(config),
        "num_experts": config["num_experts"],
        "top_k": config["num_experts_per_tok"],
        "moe_intermediate_dim": config["moe_intermediate_size"],
        "norm_top_k_prob": config.get("norm_topk_prob", False),
        "decoder_sparse_step": config.get("decoder_sparse_step", 1),
        "mlp_only_layers": list(config.get("mlp_only_layers") or []),
    }


def _mixtral_weights(config):
    moe = "model.layers.{i}.block_sparse_moe"
    block = "transformer_layer_{i}/mixtral_sparse_moe_block{n}"
    return {
        **_llama_block(),
        f"{block}/sparse_feedforward_gate_dense/kernel": (f"{moe}.gate.weight", LINEAR),
        f"{block}/experts/expert_feedforward_gate_dense": (
            f"{moe}.experts.{{e}}.w1.weight",
            EXPERTS,
        ),
        f"{block}/experts/expert_feedforward_intermediate_dense": (
            f"{moe}.experts.{{e}}.w3.weight",
            EXPERTS,
        ),
        f"{block}/experts/expert_feedforward_output_dense": (
            f"{moe}.experts.{{e}}.w2.weight",
            EXPERTS,
        ),
    }


def _qwen3_moe_weights(config):
    mlp = "model.layers.{i}.mlp"
    block = "transformer_layer_{i}/qwen3_sparse_moe_block{n}"
    return {
        **_llama_block(),
        f"{block}/sparse_feedforward_gate_dense/kernel": (f"{mlp}.gate.weight", LINEAR),
        # keras-hub fuses each expert's gate and up projections.
        f"{block}/experts/expert_feedforward_gate_dense": (
            Split(
                (
                    f"{mlp}.experts.{{e}}.gate_proj.weight",
                    f"{mlp}.experts.{{e}}.up_proj.weight",
                )
            ),
            EXPERTS,
        ),
        f"{block}/experts/expert_feedforward_output_dense": (
            f"{mlp}.experts.{{e}}.down_proj.weight",
            EXPERTS,
        ),
    }


def _phi3_config(config):
    scaling = None
    if config.get("rope_scaling_type") is not None:
        scaling = {
            "rope_type": "longrope",
            "short_factor": list(config["rope_scaling_short_factor"]),
            "long_factor": list(config["rope_scaling_long_factor"]),
        }
    return {
        **_sizes(config),
        "max_position_embeddings": config["max_sequence_length"],
        "original_max_position_embeddings": config["pretraining_sequence_length"],
        "rope_scaling": scaling,
        "tie_word_embeddings": False,
        "sliding_window": None,
    }


def _keras_hub_phi3_config(config):
    _no_options(config, "Phi3Backbone", sliding_window=None, tie_word_embeddings=False)
    scaling = config.get("rope_scaling") or {}
    options = {}
    if scaling:
        if scaling.get("rope_type") != "longrope":
            raise ValueError(
                f"keras-hub's Phi3Backbone takes LongRoPE scaling only; this "
                f"model has {scaling}."
            )
        options = {
            "rope_scaling_type": "su",
            "rope_scaling_short_factor": scaling["short_factor"],
            "rope_scaling_long_factor": scaling["long_factor"],
        }
    max_length = config.get("max_position_embeddings") or 4096
    return {
        **_keras_hub_sizes(config),
        **options,
        "max_sequence_length": max_length,
        "pretraining_sequence_length": config.get(
            "original_max_position_embeddings", max_length
        ),
    }


def _phi3_weights(config):
    layer, block = "model.layers.{i}", "transformer_layer_{i}"
    qkv, gate_up = (
        f"{layer}.self_attn.qkv_proj.weight",
        f"{layer}.mlp.gate_up_proj.weight",
    )
    return {
        f"{block}/pre_attention_layernorm/scale": (
            f"{layer}.input_layernorm.weight",
            SAME,
        ),
        f"{block}/attention/query/kernel": (Part(qkv, 0), LINEAR),
        f"{block}/attention/key/kernel": (Part(qkv, 1), LINEAR),
        f"{block}/attention/value/kernel": (Part(qkv, 2), LINEAR),
        f"{block}/attention/attention_output/kernel": (
            f"{layer}.self_attn.o_proj.weight",
            LINEAR_OUT,
        ),
        f"{block}/post_attention_layernorm/scale": (
            f"{layer}.post_attention_layernorm.weight",
            SAME,
        ),
        f"{block}/feedforward_gate_dense/kernel": (Part(gate_up, 0), LINEAR),
        f"{block}/feedforward_intermediate_dense/kernel": (Part(gate_up, 1), LINEAR),
        f"{block}/feedforward_output_dense/kernel": (
            f"{layer}.mlp.down_proj.weight",
            LINEAR,
        ),
        "sequence_output_layernorm/scale": ("model.norm.weight", SAME),
        **EMBEDDING,
        **LM_HEAD,
    }


def _gemma_architecture(config):
    """Gemma 1 has none of Gemma 2's extra norms, soft caps and windows."""
    gemma2 = (
        config.get("use_post_ffw_norm")
        or config.get("use_post_attention_norm")
        or config.get("attention_logit_soft_cap") is not None
        or config.get("final_logit_soft_cap") is not None
        or config.get("use_sliding_window_attention")
    )
    return "Gemma2ForCausalLM" if gemma2 else "GemmaForCausalLM"


def _gemma_config(config):
    architecture = _gemma_architecture(config)
    windowed = config.get("use_sliding_window_attention", False)
    hf = {
        **_sizes(config),
        "architectures": [architecture],
        # keras-hub counts both halves of the gated MLP.
        "intermediate_size": config["intermediate_dim"] // 2,
        "head_dim": config["head_dim"],
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True,
    }
    if architecture == "Gemma2ForCausalLM":
        hf.update(
            # keras-hub 0.32's Gemma decoder blocks scale queries by head_dim
            # whatever `query_head_dim_normalize` says: as keras-hub computes.
            query_pre_attn_scalar=config["head_dim"],
            attn_logit_softcapping=config.get("attention_logit_soft_cap"),
            final_logit_softcapping=config.get("final_logit_soft_cap"),
            sliding_window=config.get("sliding_window_size") if windowed else None,
            layer_types=[
                "sliding_attention" if windowed and i % 2 == 0 else "full_attention"
                for i in range(config["num_layers"])
            ],
        )
    return hf


def _keras_hub_gemma2_options(config):
    """What keras-hub's Gemma 2 and 3 share: sizes, norms, scale, caps."""
    hub = {**_keras_hub_sizes(config), "head_dim": config["head_dim"]}
    del hub["rope_max_wavelength"]
    scalar = config.get("query_pre_attn_scalar") or config["head_dim"]
    if scalar != config["head_dim"]:
        raise ValueError(
            "keras-hub 0.32's Gemma decoder blocks scale queries by head_dim "
            f"({config['head_dim']}); this model's query_pre_attn_scalar is "
            f"{scalar}."
        )
    return {
        **hub,
        "use_post_ffw_norm": True,
        "use_post_attention_norm": True,
        "attention_logit_soft_cap": config.get("attn_logit_softcapping"),
        "final_logit_soft_cap": config.get("final_logit_softcapping"),
    }


def _keras_hub_gemma_config(config):
    _no_options(config, "GemmaBackbone", rope_theta=10000.0, rope_scaling=None)
    if config["architectures"][0] == "GemmaForCausalLM":
        hub = {**_keras_hub_sizes(config), "head_dim": config["head_dim"]}
        del hub["rope_max_wavelength"]
        return {**hub, "intermediate_dim": 2 * config["intermediate_size"]}
    kinds = config.get("layer_types") or []
    windowed = "sliding_attention" in kinds
    alternate = [
        "sliding_attention" if i % 2 == 0 else "full_attention"
        for i in range(len(kinds))
    ]
    if windowed and kinds != alternate:
        raise ValueError(
            "keras-hub's GemmaBackbone windows the even layers; this model "
            f"windows {kinds}."
        )
    return {
        **_keras_hub_gemma2_options(config),
        "intermediate_dim": 2 * config["intermediate_size"],
        "use_sliding_window_attention": windowed,
        "sliding_window_size": config.get("sliding_window") or 4096,
    }


def _gemma_weights(config):
    layer, block = "model.layers.{i}", "decoder_block_{i}"
    attention = f"{layer}.self_attn"
    gemma1 = _gemma_architecture(config) == "GemmaForCausalLM"
    return {
        f"{block}/pre_attention_norm/scale": (f"{layer}.input_layernorm.weight", SAME),
        f"{block}/attention/query/kernel": (f"{attention}.q_proj.weight", HEADS_LINEAR),
        f"{block}/attention/key/kernel": (f"{attention}.k_proj.weight", HEADS_LINEAR),
        f"{block}/attention/value/kernel": (f"{attention}.v_proj.weight", HEADS_LINEAR),
        f"{block}/attention/query_norm/scale": (f"{attention}.q_norm.weight", SAME),
        f"{block}/attention/key_norm/scale": (f"{attention}.k_norm.weight", SAME),
        f"{block}/attention/attention_output/kernel": (
            f"{attention}.o_proj.weight",
            LINEAR_OUT,
        ),
        f"{block}/pre_ffw_norm/scale": (
            f"{layer}.post_attention_layernorm.weight"
            if gemma1
            else f"{layer}.pre_feedforward_layernorm.weight",
            SAME,
        ),
        f"{block}/post_attention_norm/scale": (
            f"{layer}.post_attention_layernorm.weight",
            SAME,
        ),
        f"{block}/post_ffw_norm/scale": (
            f"{layer}.post_feedforward_layernorm.weight",
            SAME,
        ),
        f"{block}/ffw_gating/kernel": (f"{layer}.mlp.gate_proj.weight", LINEAR),
        f"{block}/ffw_gating_2/kernel": (f"{layer}.mlp.up_proj.weight", LINEAR),
        f"{block}/ffw_linear/kernel": (f"{layer}.mlp.down_proj.weight", LINEAR),
        "final_normalization/scale": ("model.norm.weight", SAME),
        **EMBEDDING,
    }


def _gemma3_config(config):
    if config.get("vision_encoder") is not None:
        raise ValueError(
            "keras-gen reads Gemma 3's text model; this keras-hub Gemma 3 has "
            "a vision encoder."
        )
    _no_options(config, "Gemma3Backbone", local_rope_scaling_factor=1.0)
    windowed = config.get("use_sliding_window_attention", False)
    return {
        **_gemma_config({**config, "use_sliding_window_attention": False}),
        "architectures": ["Gemma3ForCausalLM"],
        "intermediate_size": config["intermediate_dim"],
        "query_pre_attn_scalar": config["head_dim"],
        "attn_logit_softcapping": config.get("attention_logit_soft_cap"),
        "final_logit_softcapping": config.get("final_logit_soft_cap"),
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "rope_scaling": _linear_scaling(config.get("global_rope_scaling_factor", 1.0)),
        "sliding_window": config.get("sliding_window_size") if windowed else None,
        "layer_types": [
            "sliding_attention" if windowed and i % 6 < 5 else "full_attention"
            for i in range(config["num_layers"])
        ],
    }


def _gemma3_rope(config):
    """`(global theta, global scaling or None, local theta)` of a Gemma 3
    config as keras-gen writes it (one rope entry per layer type)."""
    parameters = config["rope_parameters"]
    full = dict(parameters["full_attention"])
    theta = full.pop("rope_theta")
    scaling = full if full.get("rope_type") != "default" else None
    return theta, scaling, parameters["sliding_attention"]["rope_theta"]


def _keras_hub_gemma3_config(config):
    theta, scaling, local_theta = _gemma3_rope(config)
    if (theta, local_theta) != (1_000_000.0, 10_000.0):
        raise ValueError(
            "keras-hub's Gemma3Backbone rotates with wavelengths 1e6 (global) "
            f"and 1e4 (local); this model has {theta} and {local_theta}."
        )
    kinds = config.get("layer_types") or []
    windowed = "sliding_attention" in kinds
    pattern = [
        "sliding_attention" if i % 6 < 5 else "full_attention"
        for i in range(len(kinds))
    ]
    if windowed and kinds != pattern:
        raise ValueError(
            "keras-hub's Gemma3Backbone windows five layers of every six; this "
            f"model windows {kinds}."
        )
    return {
        **_keras_hub_gemma2_options(config),
        "image_size": 896,  # unused without a vision encoder, but required
        "use_query_key_norm": True,
        "use_sliding_window_attention": windowed,
        "sliding_window_size": config.get("sliding_window") or 1024,
        "global_rope_scaling_factor": _linear_factor(
            {"rope_scaling": scaling}, "Gemma3Backbone"
        ),
    }


def _gpt2_config(config):
    return {
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": config["vocabulary_size"],
        "n_layer": config["num_layers"],
        "n_head": config["num_heads"],
        "n_embd": config["hidden_dim"],
        "n_inner": config["intermediate_dim"],
        "n_positions": config["max_sequence_length"],
        "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new",
    }


def _keras_hub_gpt2_config(config):
    _no_options(
        config,
        "GPT2Backbone",
        layer_norm_epsilon=1e-5,
        activation_function="gelu_new",
        tie_word_embeddings=True,
    )
    return {
        "vocabulary_size": config["vocab_size"],
        "num_layers": config["n_layer"],
        "num_heads": config["n_head"],
        "hidden_dim": config["n_embd"],
        "intermediate_dim": config.get("n_inner") or 4 * config["n_embd"],
        "max_sequence_length": config["n_positions"],
    }


def _gpt2_weights(config):
    layer, block = "transformer.h.{i}", "transformer_layer_{i}"
    attention, qkv = f"{block}/self_attention", f"{layer}.attn.c_attn"
    weights = {
        "token_embedding/embeddings": ("transformer.wte.weight", SAME),
        "position_embedding/embeddings": ("transformer.wpe.weight", SAME),
        f"{attention}/attention_output/kernel": (
            f"{layer}.attn.c_proj.weight",
            CONV1D_OUT,
        ),
        f"{attention}/attention_output/bias": (f"{layer}.attn.c_proj.bias", SAME),
    }
    for index, projection in enumerate(("query", "key", "value")):
        weights[f"{attention}/{projection}/kernel"] = (
            Part(f"{qkv}.weight", index),
            CONV1D,
        )
        weights[f"{attention}/{projection}/bias"] = (Part(f"{qkv}.bias", index), FLAT)
    for hub, hf in (
        (f"{block}/self_attention_layer_norm", f"{layer}.ln_1"),
        (f"{block}/feedforward_layer_norm", f"{layer}.ln_2"),
        ("layer_norm", "transformer.ln_f"),
    ):
        weights[f"{hub}/gamma"] = (f"{hf}.weight", SAME)
        weights[f"{hub}/beta"] = (f"{hf}.bias", SAME)
    for hub, hf in (
        ("feedforward_intermediate_dense", "mlp.c_fc"),
        ("feedforward_output_dense", "mlp.c_proj"),
    ):
        weights[f"{block}/{hub}/kernel"] = (f"{layer}.{hf}.weight", SAME)
        weights[f"{block}/{hub}/bias"] = (f"{layer}.{hf}.bias", SAME)
    return weights


def _llama_weights(config):
    return _llama_block()


# keras-hub backbone class name -> its family.
FAMILIES = {
    "GPT2Backbone": Family(
        "GPT2LMHeadModel", _gpt2_config, _keras_hub_gpt2_config, _gpt2_weights
    ),
    "LlamaBackbone": Family(
        "LlamaForCausalLM", _llama_config, _keras_hub_llama_config, _llama_weights
    ),
    "MistralBackbone": Family(
        "MistralForCausalLM",
        _mistral_config,
        _keras_hub_mistral_config,
        _llama_weights,
    ),
    "MixtralBackbone": Family(
        "MixtralForCausalLM",
        _mixtral_config,
        _keras_hub_mixtral_config,
        _mixtral_weights,
    ),
    "QwenBackbone": Family(
        "Qwen2ForCausalLM", _qwen_config, _keras_hub_qwen_config, _llama_weights
    ),
    "Qwen3Backbone": Family(
        "Qwen3ForCausalLM", _qwen3_config, _keras_hub_qwen3_config, _llama_weights
    ),
    "Qwen3MoeBackbone": Family(
        "Qwen3MoeForCausalLM",
        _qwen3_moe_config,
        _keras_hub_qwen3_moe_config,
        _qwen3_moe_weights,
    ),
    "GemmaBackbone": Family(
        "GemmaForCausalLM", _gemma_config, _keras_hub_gemma_config, _gemma_weights
    ),
    "Gemma3Backbone": Family(
        "Gemma3ForCausalLM", _gemma3_config, _keras_hub_gemma3_config, _gemma_weights
    ),
    "Phi3Backbone": Family(
        "Phi3ForCausalLM", _phi3_config, _keras_hub_phi3_config, _phi3_weights
    ),
}
FAMILIES["Llama3Backbone"] = FAMILIES["LlamaBackbone"]

# Hugging Face architecture -> the keras-hub backbone it becomes. A Llama
# becomes a `Llama3Backbone` when its rope or its tokenizer (byte-level BPE)
# is Llama 3's.
BACKBONES = {
    family.architecture: name
    for name, family in FAMILIES.items()
    if name != "Llama3Backbone"
}
BACKBONES["Gemma2ForCausalLM"] = "GemmaBackbone"
