"""Tiny random GPT-2 models made with `transformers`, copied into ours.

A test-only helper (the real checkpoint loader lives in the package): our
layer names mirror the Hugging Face ones, so the copy is a rename.
"""

import numpy as np

from keras_gen.models import GPT2Backbone
from keras_gen.models import GPT2CausalLM


def make_hf_gpt2(
    seed=0,
    vocabulary_size=64,
    hidden_dim=16,
    num_layers=2,
    num_heads=2,
    max_sequence_length=128,
    initializer_range=0.3,
):
    """A tiny `GPT2LMHeadModel` with spread-out logits.

    The default initializer range (0.02) makes a tiny model's logits nearly
    equal, so searches would be decided by float noise.
    """
    import torch
    import transformers

    config = transformers.GPT2Config(
        vocab_size=vocabulary_size,
        n_positions=max_sequence_length,
        n_embd=hidden_dim,
        n_layer=num_layers,
        n_head=num_heads,
        n_inner=2 * hidden_dim,
        initializer_range=initializer_range,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # LayerNorm starts at exactly 1 and 0: vary it.
        for name, parameter in model.named_parameters():
            if "ln_" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def hf_weights(hf_model):
    """Our weight paths (without the backbone's name) to numpy arrays."""
    state = {
        k.removeprefix("transformer."): v.detach().numpy()
        for k, v in hf_model.state_dict().items()
    }
    ours = {
        "wte/embeddings": state["wte.weight"],
        "wpe/embeddings": state["wpe.weight"],
        "ln_f/gamma": state["ln_f.weight"],
        "ln_f/beta": state["ln_f.bias"],
    }
    sublayers = {
        "ln_1": "ln_1",
        "c_attn": "attn.c_attn",
        "c_proj": "attn.c_proj",
        "ln_2": "ln_2",
        "c_fc": "mlp.c_fc",
        "mlp_c_proj": "mlp.c_proj",
    }
    for i in range(hf_model.config.n_layer):
        for our_name, hf_name in sublayers.items():
            weight, bias = (
                ("gamma", "beta") if our_name.startswith("ln") else ("kernel", "bias")
            )
            ours[f"h_{i}/{our_name}/{weight}"] = state[f"h.{i}.{hf_name}.weight"]
            ours[f"h_{i}/{our_name}/{bias}"] = state[f"h.{i}.{hf_name}.bias"]
    return ours


def gpt2_from_hf(hf_model):
    """A `GPT2CausalLM` with `hf_model`'s weights."""
    config = hf_model.config
    backbone = GPT2Backbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.n_layer,
        num_heads=config.n_head,
        hidden_dim=config.n_embd,
        intermediate_dim=config.n_inner,
        max_sequence_length=config.n_positions,
        layer_norm_epsilon=config.layer_norm_epsilon,
    )
    weights = hf_weights(hf_model)
    for variable in backbone.weights:
        value = weights.pop(variable.path.split("/", 1)[1])
        variable.assign(np.asarray(value, variable.dtype))
    assert not weights, f"not copied: {sorted(weights)}"
    return GPT2CausalLM(backbone)
