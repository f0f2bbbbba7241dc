"""A mixture-of-experts MLP: a router picks the top-k experts per token."""

import keras
from keras import ops

from keras_gen.layers.dense import Dense
from keras_gen.layers.lean_call import LeanCall
from keras_gen.utils.checks import check_choice

ACTIVATIONS = ("silu", "gelu_approximate")
# The router's layer name; `CausalLM.quantize` leaves routers float.
ROUTER_NAME = "router"


def activate(x, activation):
    """`activation` of `x`: `"silu"` (SwiGLU) or `"gelu_approximate"` (GeGLU)."""
    if activation == "silu":
        return keras.activations.silu(x)
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="keras_gen")
class MixtureOfExperts(LeanCall, keras.layers.Layer):
    """Gated MLP experts, `num_experts_per_token` of them per token.

    A bias-free `router` scores the experts; the softmax of the scores
    (float32) picks the top `num_experts_per_token`, whose weights are
    renormalized to sum to one when `normalize_weights` (Mixtral; Qwen3-MoE's
    `norm_topk_prob`). Each expert is `down(act(x @ gate) * (x @ up))`; the
    token's output is the weighted sum of its experts'. Routing is tensor
    ops in the compiled step: no host round trip.

    Two equal ways to compute it, picked from the static token count: when
    `tokens * num_experts_per_token < num_experts` (decoding a small batch)
    each token's chosen experts are gathered, so only their weights are
    read; otherwise (prompts) every expert runs on every token and the
    unchosen ones get weight zero.

    Args:
        num_experts: int.
        num_experts_per_token: int, the top-k.
        intermediate_dim: int, each expert's MLP width.
        activation: `"silu"` or `"gelu_approximate"`.
        normalize_weights: bool, renormalize the top-k weights.

    Call arguments:
        x: `(batch, length, hidden_dim)`.

    Examples:
    >>> moe = MixtureOfExperts(num_experts=4, num_experts_per_token=2,
    ...                        intermediate_dim=16)
    >>> keras.ops.shape(moe(keras.ops.ones((1, 3, 8))))
    (1, 3, 8)
    """

    def __init__(
        self,
        num_experts,
        num_experts_per_token,
        intermediate_dim,
        activation="silu",
        normalize_weights=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not 1 <= num_experts_per_token <= num_experts:
            raise ValueError(
                "`num_experts_per_token` must be in [1, num_experts]. Received: "
                f"num_experts_per_token={num_experts_per_token}, "
                f"num_experts={num_experts}"
            )
        check_choice("activation", activation, ACTIVATIONS)
        self.num_experts = num_experts
        self.num_experts_per_token = num_experts_per_token
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.normalize_weights = normalize_weights
        self.router = Dense(
            num_experts, use_bias=False, dtype=self.dtype_policy, name=ROUTER_NAME
        )

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        experts, width = self.num_experts, self.intermediate_dim
        self.router.build(input_shape)
        self.gate_kernel = self.add_weight(
            name="gate_kernel", shape=(experts, hidden_dim, width)
        )
        self.up_kernel = self.add_weight(
            name="up_kernel", shape=(experts, hidden_dim, width)
        )
        self.down_kernel = self.add_weight(
            name="down_kernel", shape=(experts, width, hidden_dim)
        )
        self.built = True

    def route(self, x):
        """`(weights, experts)`, each `(..., num_experts_per_token)`."""
        probabilities = ops.softmax(ops.cast(self.router(x), "float32"), axis=-1)
        weights, experts = ops.top_k(probabilities, self.num_experts_per_token)
        if self.normalize_weights:
            weights = weights / ops.sum(weights, axis=-1, keepdims=True)
        return weights, experts

    def call(self, x):
        shape = ops.shape(x)
        flat = ops.reshape(x, (-1, shape[-1]))
        weights, experts = self.route(flat)
        weights = ops.cast(weights, x.dtype)
        tokens = flat.shape[0]
        if (
            tokens is not None
            and tokens * self.num_experts_per_token < self.num_experts
        ):
            outputs = self._gathered(flat, weights, experts)
        else:
            outputs = self._dense(flat, weights, experts)
        return ops.reshape(outputs, shape)

    def _gathered(self, x, weights, experts):
        # (tokens * k, ...): one row per chosen (token, expert) pair.
        chosen = ops.reshape(experts, (-1,))
        rows = ops.repeat(x, self.num_experts_per_token, axis=0)
        gate = ops.einsum(
            "nh,nhi->ni", rows, ops.take(self.gate_kernel, chosen, axis=0)
        )
        up = ops.einsum("nh,nhi->ni", rows, ops.take(self.up_kernel, chosen, axis=0))
        hidden = activate(gate, self.activation) * up
        down = ops.einsum(
            "ni,nih->nh", hidden, ops.take(self.down_kernel, chosen, axis=0)
        )
        down = ops.reshape(down, (-1, self.num_experts_per_token, ops.shape(x)[-1]))
        return ops.einsum("tkh,tk->th", down, weights)

    def _dense(self, x, weights, experts):
        # (tokens, num_experts): zero for the experts a token did not pick.
        one_hot = ops.one_hot(experts, self.num_experts, dtype=weights.dtype)
        weights = ops.einsum("tke,tk->te", one_hot, weights)
        gate = ops.einsum("th,ehi->tei", x, self.gate_kernel)
        up = ops.einsum("th,ehi->tei", x, self.up_kernel)
        hidden = activate(gate, self.activation) * up
        down = ops.einsum("tei,eih->teh", hidden, self.down_kernel)
        return ops.einsum("teh,te->th", down, weights)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_experts": self.num_experts,
                "num_experts_per_token": self.num_experts_per_token,
                "intermediate_dim": self.intermediate_dim,
                "activation": self.activation,
                "normalize_weights": self.normalize_weights,
            }
        )
        return config
