"""Hugging Face Qwen3 and Qwen3-MoE checkpoints to and from `Qwen3Backbone`.

The converter interface is the one `gpt2_checkpoint` describes.
"""

import sys

from keras_gen.models import architectures
from keras_gen.models import decoder_checkpoint
from keras_gen.models.qwen3.qwen3_backbone import Qwen3Backbone
from keras_gen.models.qwen3.qwen3_causal_lm import Qwen3CausalLM

CAUSAL_LM_CLASS = Qwen3CausalLM
MODEL_TYPES = {"Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe"}
ALLOWED = {
    "query_key_value_bias",
    "attention_output_bias",
    "sliding_window",
    "sliding_window_layers",
    "num_experts",
    "num_experts_per_token",
    "expert_intermediate_dim",
    "normalize_expert_weights",
    "dense_layers",
}


def _experts(config):
    """Qwen3-MoE's expert options: which layers route, and how."""
    num_experts = config.get("num_local_experts") or config.get("num_experts")
    num_layers = config["num_hidden_layers"]
    step = config.get("decoder_sparse_step", 1)
    dense_only = set(config.get("mlp_only_layers") or [])
    dense = [i for i in range(num_layers) if i in dense_only or (i + 1) % step]
    return {
        "num_experts": num_experts,
        "num_experts_per_token": config.get("num_experts_per_tok", 8),
        "expert_intermediate_dim": config["moe_intermediate_size"],
        "normalize_expert_weights": bool(config.get("norm_topk_prob", False)),
        "dense_layers": dense or None,
    }


def backbone_from_config(config, architecture, dtype=None):
    options = {
        **decoder_checkpoint.attention_bias(config),
        **decoder_checkpoint.qwen_windows(config),
    }
    if architecture == "Qwen3MoeForCausalLM":
        options.update(_experts(config))
    kwargs = decoder_checkpoint.sizes(config, architecture)
    return Qwen3Backbone(**kwargs, dtype=dtype, **options)


def config_from_backbone(backbone):
    moe = backbone.num_experts is not None
    architecture = "Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"
    decoder_checkpoint.check_options(
        backbone, architecture, ALLOWED, fixed={"query_key_norm": "head"}
    )
    config = decoder_checkpoint.base_config(
        backbone, architecture, MODEL_TYPES[architecture]
    )
    decoder_checkpoint.write_attention_bias(backbone, architecture, config)
    decoder_checkpoint.write_qwen_windows(backbone, config)
    if moe:
        dense = backbone.dense_layers or []
        config.update(
            num_experts=backbone.num_experts,
            num_experts_per_tok=backbone.num_experts_per_token,
            moe_intermediate_size=backbone.expert_intermediate_dim
            or backbone.intermediate_dim,
            norm_topk_prob=backbone.normalize_expert_weights,
            decoder_sparse_step=1,
            mlp_only_layers=dense,
        )
    return config


weight_map = decoder_checkpoint.weight_map


architectures.register(sys.modules[__name__], MODEL_TYPES, Qwen3Backbone)
