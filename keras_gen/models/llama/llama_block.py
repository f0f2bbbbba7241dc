"""One Llama-family transformer block."""

import keras
from keras import ops

from keras_gen.layers.cached_attention import CachedAttention
from keras_gen.layers.rms_normalization import RMSNormalization


class LlamaBlock(keras.layers.Layer):
    """A pre-norm block: rotary grouped-query attention, then a SwiGLU MLP.

    Sublayer names follow the Hugging Face checkpoint (`input_layernorm`,
    `q_proj`, `k_proj`, `v_proj`, `o_proj`, `post_attention_layernorm`,
    `gate_proj`, `up_proj`, `down_proj`) so that converting weights is a
    transpose and a copy.

    Args:
        num_query_heads: int.
        num_key_value_heads: int, divides `num_query_heads`.
        hidden_dim: int, the model width.
        intermediate_dim: int, the MLP width.
        head_dim: int, the size of each head.
        rotary_embedding: the `RotaryEmbedding` the block applies.
        layer_norm_epsilon: float.
        query_key_value_bias: bool, biases on `q_proj`, `k_proj`, `v_proj`.
        attention_output_bias: bool, a bias on `o_proj`.
        mlp_bias: bool, biases on the MLP projections.
        sliding_window: `None` or int, how many recent positions each token
            attends to (itself included).

    Call arguments:
        x: `(batch, length, hidden_dim)` hidden states.
        cache: `None` or this block's `(key_cache, value_cache)`.
        index: scalar int tensor, the position of `x`'s first token, or
            `(batch,)`: one position per row.
        seed_cache: bool, see `CachedAttention`.
    """

    def __init__(
        self,
        num_query_heads,
        num_key_value_heads,
        hidden_dim,
        intermediate_dim,
        head_dim,
        rotary_embedding,
        layer_norm_epsilon=1e-6,
        query_key_value_bias=False,
        attention_output_bias=False,
        mlp_bias=False,
        sliding_window=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_query_heads = num_query_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.head_dim = head_dim
        self.rotary_embedding = rotary_embedding
        policy = self.dtype_policy

        def dense(units, use_bias, name):
            return keras.layers.Dense(
                units, use_bias=use_bias, dtype=policy, name=name
            )

        self.input_layernorm = RMSNormalization(
            layer_norm_epsilon, dtype=policy, name="input_layernorm"
        )
        self.q_proj = dense(num_query_heads * head_dim, query_key_value_bias, "q_proj")
        self.k_proj = dense(
            num_key_value_heads * head_dim, query_key_value_bias, "k_proj"
        )
        self.v_proj = dense(
            num_key_value_heads * head_dim, query_key_value_bias, "v_proj"
        )
        self.attention = CachedAttention(
            sliding_window=sliding_window, dtype=policy, name="attention"
        )
        self.o_proj = dense(hidden_dim, attention_output_bias, "o_proj")
        self.post_attention_layernorm = RMSNormalization(
            layer_norm_epsilon, dtype=policy, name="post_attention_layernorm"
        )
        self.gate_proj = dense(intermediate_dim, mlp_bias, "gate_proj")
        self.up_proj = dense(intermediate_dim, mlp_bias, "up_proj")
        self.down_proj = dense(hidden_dim, mlp_bias, "down_proj")

    def build(self, input_shape):
        for layer in (
            self.input_layernorm,
            self.q_proj,
            self.k_proj,
            self.v_proj,
            self.post_attention_layernorm,
            self.gate_proj,
            self.up_proj,
        ):
            layer.build(input_shape)
        self.o_proj.build(input_shape[:-1] + (self.num_query_heads * self.head_dim,))
        self.down_proj.build(input_shape[:-1] + (self.intermediate_dim,))
        self.built = True

    def _split_heads(self, x, num_heads):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, num_heads, self.head_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(self, x, cache=None, index=0, seed_cache=False, training=False):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        normed = self.input_layernorm(x)
        query = self._split_heads(self.q_proj(normed), self.num_query_heads)
        key = self._split_heads(self.k_proj(normed), self.num_key_value_heads)
        value = self._split_heads(self.v_proj(normed), self.num_key_value_heads)
        attended, cache = self.attention(
            self.rotary_embedding(query, index=index),
            self.rotary_embedding(key, index=index),
            value,
            cache=cache,
            index=index,
            seed_cache=seed_cache,
        )
        attended = ops.reshape(
            ops.transpose(attended, (0, 2, 1, 3)),
            (batch, length, self.num_query_heads * self.head_dim),
        )
        x = x + self.o_proj(attended)
        normed = self.post_attention_layernorm(x)
        gate = keras.activations.silu(self.gate_proj(normed))
        x = x + self.down_proj(gate * self.up_proj(normed))
        return x, cache
