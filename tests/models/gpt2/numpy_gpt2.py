"""A plain numpy GPT-2 with no cache: the oracle the tests compare against."""

import numpy as np


def _weights(backbone):
    return {
        v.path.split("/", 1)[1]: np.asarray(v.numpy(), "float64")
        for v in backbone.weights
    }


def _layer_norm(x, w, name, epsilon=1e-5):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * w[f"{name}/gamma"] + w[
        f"{name}/beta"
    ]


def _dense(x, w, name):
    return x @ w[f"{name}/kernel"] + w[f"{name}/bias"]


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def logits(backbone, token_ids):
    """`(length, vocab)` logits of one unpadded sequence."""
    w = _weights(backbone)
    heads = backbone.num_heads
    length = len(token_ids)
    x = w["wte/embeddings"][token_ids] + w["wpe/embeddings"][:length]
    causal = np.tril(np.ones((length, length), bool))
    for i in range(backbone.num_layers):
        block = f"h_{i}"
        qkv = _dense(_layer_norm(x, w, f"{block}/ln_1"), w, f"{block}/c_attn")
        q, k, v = (
            t.reshape(length, heads, -1).transpose(1, 0, 2)
            for t in np.split(qkv, 3, axis=-1)
        )
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        scores = np.where(causal, scores, -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        attended = attended.transpose(1, 0, 2).reshape(length, -1)
        x = x + _dense(attended, w, f"{block}/c_proj")
        mlp = _gelu(_dense(_layer_norm(x, w, f"{block}/ln_2"), w, f"{block}/c_fc"))
        x = x + _dense(mlp, w, f"{block}/mlp_c_proj")
    x = _layer_norm(x, w, "ln_f")
    return x @ w["wte/embeddings"].T


def greedy(backbone, prompt, max_new_tokens, stop_token_ids=()):
    """Greedy decoding by re-running the whole sequence at every step."""
    tokens = list(prompt)
    for _ in range(max_new_tokens):
        tokens.append(int(np.argmax(logits(backbone, tokens)[-1])))
        if tokens[-1] in stop_token_ids:
            break
    return tokens
