"""Hugging Face `GPT2LMHeadModel` checkpoints to and from `GPT2Backbone`.

The converter interface (used by `keras_gen.models.checkpoint`):
`CAUSAL_LM_CLASS`, `backbone_from_config`, `config_from_backbone`,
`weight_map` (checkpoint name, Keras variable, whether the checkpoint
stores it transposed) and, when loading needs more than the map,
`load_weights(backbone, reader)`.
"""

import sys

from keras_gen.models import architectures
from keras_gen.models.gpt2.gpt2_backbone import GPT2Backbone
from keras_gen.models.gpt2.gpt2_causal_lm import GPT2CausalLM
from keras_gen.utils.checks import check_int
from keras_gen.utils.checks import check_positive

CAUSAL_LM_CLASS = GPT2CausalLM
# GPT-2 in transformers is `transformer.*` plus a tied `lm_head`; the
# original OpenAI upload has the same names without the prefix.
PREFIX = "transformer."
# GPT-2's tanh-approximated gelu, under its Hugging Face names.
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def _check(config):
    unsupported = {
        "activation_function": (
            config.get("activation_function", "gelu_new") not in ACTIVATIONS
        ),
        "scale_attn_weights": not config.get("scale_attn_weights", True),
        "scale_attn_by_inverse_layer_idx": config.get(
            "scale_attn_by_inverse_layer_idx", False
        ),
        "tie_word_embeddings": not config.get("tie_word_embeddings", True),
        "add_cross_attention": config.get("add_cross_attention", False),
    }
    for key, bad in unsupported.items():
        if bad:
            raise ValueError(
                f"This GPT-2 checkpoint sets {key}={config.get(key)!r}, which "
                "keras-gen's GPT2Backbone does not support (it is a plain "
                f"GPT-2 with a {ACTIVATIONS[0]} MLP and tied embeddings)."
            )


def size(config, key, default=None, optional=False):
    """A positive int entry of `config.json` (`default` when absent or
    null; `None` then if `optional`), or a clear error."""
    value = config.get(key)
    if value is None:
        value = default
    if value is None and optional:
        return None
    return check_int(f"config.json's {key}", value, low=1)


def epsilon(config, key, default):
    """A normalization epsilon of `config.json` (`default` when absent or
    null): a finite float > 0, or a clear error."""
    value = config.get(key)
    return check_positive(f"config.json's {key}", default if value is None else value)


def backbone_from_config(config, architecture, dtype=None):
    _check(config)
    hidden_dim = size(config, "n_embd", 768)
    return GPT2Backbone(
        vocabulary_size=size(config, "vocab_size"),
        num_layers=size(config, "n_layer", 12),
        num_heads=size(config, "n_head", 12),
        hidden_dim=hidden_dim,
        intermediate_dim=size(config, "n_inner", 4 * hidden_dim),
        max_sequence_length=size(config, "n_positions", 1024),
        layer_norm_epsilon=epsilon(config, "layer_norm_epsilon", 1e-5),
        dtype=dtype,
    )


def config_from_backbone(backbone):
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": backbone.vocabulary_size,
        "n_layer": backbone.num_layers,
        "n_head": backbone.num_heads,
        "n_embd": backbone.hidden_dim,
        "n_inner": backbone.intermediate_dim,
        "n_positions": backbone.max_sequence_length,
        "layer_norm_epsilon": backbone.layer_norm_epsilon,
        "activation_function": "gelu_new",
        "tie_word_embeddings": True,
        "attn_pdrop": backbone.dropout,
        "embd_pdrop": backbone.dropout,
        "resid_pdrop": backbone.dropout,
    }


def _norm(layer, name):
    return [(f"{name}.weight", layer.gamma, False), (f"{name}.bias", layer.beta, False)]


def _dense(layer, name):
    # transformers' `Conv1D` stores `(in, out)`, the layout of a Keras kernel.
    return [
        (f"{name}.weight", layer._kernel, False),
        (f"{name}.bias", layer.bias, False),
    ]


def weight_map(backbone, prefix=PREFIX):
    weights = [
        (f"{prefix}wte.weight", backbone.wte.embeddings, False),
        (f"{prefix}wpe.weight", backbone.wpe.embeddings, False),
    ]
    for i, block in enumerate(backbone.transformer_layers):
        name = f"{prefix}h.{i}"
        weights += _norm(block.ln_1, f"{name}.ln_1")
        weights += _dense(block.c_attn, f"{name}.attn.c_attn")
        weights += _dense(block.c_proj, f"{name}.attn.c_proj")
        weights += _norm(block.ln_2, f"{name}.ln_2")
        weights += _dense(block.c_fc, f"{name}.mlp.c_fc")
        weights += _dense(block.mlp_c_proj, f"{name}.mlp.c_proj")
    weights += _norm(backbone.ln_f, f"{prefix}ln_f")
    return weights


def load_weights(backbone, reader):
    prefix = PREFIX if f"{PREFIX}wte.weight" in reader else ""
    reader.load_all(weight_map(backbone, prefix))


architectures.register(sys.modules[__name__], {"GPT2LMHeadModel": "gpt2"}, GPT2Backbone)
