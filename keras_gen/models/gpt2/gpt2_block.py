"""One GPT-2 transformer block."""

import keras
from keras import ops

from keras_gen.layers.cached_attention import CachedAttention
from keras_gen.layers.dense import Dense
from keras_gen.layers.dropout import Dropout
from keras_gen.layers.layer_normalization import LayerNormalization
from keras_gen.layers.lean_call import LeanCall


@keras.saving.register_keras_serializable(package="keras_gen")
class GPT2Block(LeanCall, keras.layers.Layer):
    """A pre-norm GPT-2 block: attention then a gelu MLP, each residual.

    Sublayer names follow the Hugging Face checkpoint (`ln_1`, `c_attn`,
    `c_proj`, `ln_2`, `c_fc`, `mlp_c_proj`), and the fused query/key/value
    projection keeps its `(hidden, 3 * hidden)` kernel, so converting a
    checkpoint is a direct copy.

    Args:
        num_heads: int, attention heads.
        hidden_dim: int, the model width.
        intermediate_dim: int, the MLP width.
        dropout: float, dropout rate during training.
        layer_norm_epsilon: float.

    Call arguments:
        x: `(batch, length, hidden_dim)` hidden states.
        cache: `None` or this block's `(key_cache, value_cache)`.
        index: scalar int tensor, the position of `x`'s first token, or
            `(batch,)`: one position per row.
        seed_cache: bool, see `CachedAttention`.
        padding_mask: `None` or `(batch, length)`, see `CachedAttention`.
    """

    def __init__(
        self,
        num_heads,
        hidden_dim,
        intermediate_dim,
        dropout=0.0,
        layer_norm_epsilon=1e-5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.head_dim = hidden_dim // num_heads
        self.ln_1 = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="ln_1"
        )
        self.c_attn = Dense(3 * hidden_dim, dtype=self.dtype_policy, name="c_attn")
        self.attention = CachedAttention(dtype=self.dtype_policy, name="attention")
        self.c_proj = Dense(hidden_dim, dtype=self.dtype_policy, name="c_proj")
        self.ln_2 = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="ln_2"
        )
        self.c_fc = Dense(intermediate_dim, dtype=self.dtype_policy, name="c_fc")
        self.mlp_c_proj = Dense(hidden_dim, dtype=self.dtype_policy, name="mlp_c_proj")
        self.dropout = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.ln_1.build(input_shape)
        self.c_attn.build(input_shape)
        self.c_proj.build(input_shape)
        self.ln_2.build(input_shape)
        self.c_fc.build(input_shape)
        self.mlp_c_proj.build(input_shape[:-1] + (self.intermediate_dim,))
        self.built = True

    def _split_heads(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, self.head_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(
        self,
        x,
        cache=None,
        index=0,
        seed_cache=False,
        padding_mask=None,
        training=False,
    ):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        query, key, value = ops.split(self.c_attn(self.ln_1(x)), 3, axis=-1)
        attended, cache = self.attention(
            self._split_heads(query),
            self._split_heads(key),
            self._split_heads(value),
            cache=cache,
            index=index,
            seed_cache=seed_cache,
            padding_mask=padding_mask,
        )
        attended = ops.reshape(
            ops.transpose(attended, (0, 2, 1, 3)),
            (batch, length, self.hidden_dim),
        )
        x = x + self.dropout(self.c_proj(attended), training=training)
        mlp = self.c_fc(self.ln_2(x))
        mlp = keras.activations.gelu(mlp, approximate=True)
        x = x + self.dropout(self.mlp_c_proj(mlp), training=training)
        return x, cache
