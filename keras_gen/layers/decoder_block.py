"""The transformer block every rotary decoder family is made of."""

import keras
from keras import ops

from keras_gen.layers.cached_attention import CachedAttention
from keras_gen.layers.dense import Dense
from keras_gen.layers.lean_call import LeanCall
from keras_gen.layers.mixture_of_experts import ACTIVATIONS
from keras_gen.layers.mixture_of_experts import MixtureOfExperts
from keras_gen.layers.mixture_of_experts import activate
from keras_gen.layers.rms_normalization import RMSNormalization
from keras_gen.utils.checks import check_choice

# Where the RMSNorms sit around the attention and the MLP:
# "pre"      x += attn(norm(x));        x += mlp(norm(x))         Llama, Qwen, Phi-3, Mixtral
# "sandwich" x += norm(attn(norm(x)));  x += norm(mlp(norm(x)))   Gemma 2 and 3
# "post"     x += norm(attn(x));        x += norm(mlp(x))         OLMo 2
NORM_PLACEMENTS = ("pre", "sandwich", "post")
# Normalization of queries and keys before the rotation: per head over
# `head_dim` (Qwen3, Gemma 3), or over the whole projection (OLMo 2).
QUERY_KEY_NORMS = (None, "head", "projection")


class DecoderBlock(LeanCall, keras.layers.Layer):
    """Rotary grouped-query attention and a gated MLP (or experts), with norms.

    Llama, Mistral, Qwen 2 and 3, Gemma 1 to 3, Phi-3, OLMo 2 and the
    mixture-of-experts models differ only in the options of this block.
    Sublayer names follow the Hugging Face checkpoints (`input_layernorm`,
    `q_proj` ... `o_proj` or a fused `qkv_proj`, `q_norm`, `k_norm`,
    `post_attention_layernorm`, `pre_feedforward_layernorm`,
    `post_feedforward_layernorm`, `gate_proj`, `up_proj` or a fused
    `gate_up_proj`, `down_proj`, or `mlp` for experts), so converting weights
    is a transpose and a copy.

    Args:
        num_query_heads: int.
        num_key_value_heads: int, divides `num_query_heads`.
        hidden_dim: int, the model width.
        intermediate_dim: int, the MLP width (each expert's width with
            `num_experts`).
        head_dim: int, the size of each head.
        rotary_embedding: the `RotaryEmbedding` the block applies, or
            `None`: no position encoding in this block (SmolLM3's NoPE
            layers).
        layer_norm_epsilon: float.
        activation: `"silu"` (SwiGLU) or `"gelu_approximate"` (GeGLU).
        norm_placement: `"pre"`, `"sandwich"` or `"post"` (see
            `NORM_PLACEMENTS`).
        norm_unit_offset: bool, norms scale by `1 + w` (Gemma).
        query_key_norm: `None`, `"head"` or `"projection"`.
        query_key_value_bias: bool, biases on the query, key and value
            projections.
        attention_output_bias: bool, a bias on `o_proj`.
        mlp_bias: bool, biases on the MLP projections.
        fused_projections: bool, one `qkv_proj` and one `gate_up_proj`
            (Phi-3) instead of separate projections.
        sliding_window: `None` or int, how many recent positions each token
            attends to (itself included).
        attention_scale: `None` (`1 / sqrt(head_dim)`) or float.
        attention_logit_softcap: `None` or float, see `CachedAttention`.
        num_experts: `None` (a dense MLP) or int: a `MixtureOfExperts`.
        num_experts_per_token: int, experts per token.
        normalize_expert_weights: bool, see `MixtureOfExperts`.

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
        num_query_heads,
        num_key_value_heads,
        hidden_dim,
        intermediate_dim,
        head_dim,
        rotary_embedding,
        layer_norm_epsilon=1e-6,
        activation="silu",
        norm_placement="pre",
        norm_unit_offset=False,
        query_key_norm=None,
        query_key_value_bias=False,
        attention_output_bias=False,
        mlp_bias=False,
        fused_projections=False,
        sliding_window=None,
        attention_scale=None,
        attention_logit_softcap=None,
        num_experts=None,
        num_experts_per_token=2,
        normalize_expert_weights=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_choice("activation", activation, ACTIVATIONS)
        check_choice("norm_placement", norm_placement, NORM_PLACEMENTS)
        check_choice("query_key_norm", query_key_norm, QUERY_KEY_NORMS)
        self.num_query_heads = num_query_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.head_dim = head_dim
        self.rotary_embedding = rotary_embedding
        self.activation = activation
        self.norm_placement = norm_placement
        self.query_key_norm = query_key_norm
        self.fused_projections = fused_projections
        policy = self.dtype_policy

        def dense(units, use_bias, name):
            return Dense(units, use_bias=use_bias, dtype=policy, name=name)

        def norm(name):
            return RMSNormalization(
                layer_norm_epsilon,
                unit_offset=norm_unit_offset,
                dtype=policy,
                name=name,
            )

        query_width = num_query_heads * head_dim
        key_width = num_key_value_heads * head_dim
        # The norms, by Hugging Face name, around attention and the MLP.
        before_attention, after_attention, before_mlp, after_mlp = {
            "pre": ("input_layernorm", None, "post_attention_layernorm", None),
            "sandwich": (
                "input_layernorm",
                "post_attention_layernorm",
                "pre_feedforward_layernorm",
                "post_feedforward_layernorm",
            ),
            "post": (
                None,
                "post_attention_layernorm",
                None,
                "post_feedforward_layernorm",
            ),
        }[norm_placement]
        self.norm_names = tuple(
            name
            for name in (before_attention, after_attention, before_mlp, after_mlp)
            if name is not None
        )
        # Sublayers are made in the order they compute: weights are listed
        # (and seeded) in that order.
        if before_attention:
            setattr(self, before_attention, norm(before_attention))
        if fused_projections:
            self.qkv_proj = dense(
                query_width + 2 * key_width, query_key_value_bias, "qkv_proj"
            )
        else:
            self.q_proj = dense(query_width, query_key_value_bias, "q_proj")
            self.k_proj = dense(key_width, query_key_value_bias, "k_proj")
            self.v_proj = dense(key_width, query_key_value_bias, "v_proj")
        if query_key_norm is not None:
            self.q_norm = norm("q_norm")
            self.k_norm = norm("k_norm")
        self.attention = CachedAttention(
            sliding_window=sliding_window,
            scale=attention_scale,
            logit_softcap=attention_logit_softcap,
            dtype=policy,
            name="attention",
        )
        self.o_proj = dense(hidden_dim, attention_output_bias, "o_proj")
        for name in (after_attention, before_mlp):
            if name:
                setattr(self, name, norm(name))
        self.mlp = None
        if num_experts is not None:
            self.mlp = MixtureOfExperts(
                num_experts,
                num_experts_per_token,
                intermediate_dim,
                activation=activation,
                normalize_weights=normalize_expert_weights,
                dtype=policy,
                name="mlp",
            )
        elif fused_projections:
            self.gate_up_proj = dense(2 * intermediate_dim, mlp_bias, "gate_up_proj")
        else:
            self.gate_proj = dense(intermediate_dim, mlp_bias, "gate_proj")
            self.up_proj = dense(intermediate_dim, mlp_bias, "up_proj")
        if self.mlp is None:
            self.down_proj = dense(hidden_dim, mlp_bias, "down_proj")
        if after_mlp:
            setattr(self, after_mlp, norm(after_mlp))

    def build(self, input_shape):
        query_width = self.num_query_heads * self.head_dim
        key_width = self.num_key_value_heads * self.head_dim
        for name in self.norm_names:
            getattr(self, name).build(input_shape)
        inputs = (
            ["qkv_proj"] if self.fused_projections else ["q_proj", "k_proj", "v_proj"]
        )
        if self.mlp is not None:
            inputs.append("mlp")
        else:
            inputs += (
                ["gate_up_proj"] if self.fused_projections else ["gate_proj", "up_proj"]
            )
        for name in inputs:
            getattr(self, name).build(input_shape)
        self.o_proj.build(input_shape[:-1] + (query_width,))
        if self.mlp is None:
            self.down_proj.build(input_shape[:-1] + (self.intermediate_dim,))
        if self.query_key_norm == "head":
            self.q_norm.build((None, None, None, self.head_dim))
            self.k_norm.build((None, None, None, self.head_dim))
        elif self.query_key_norm == "projection":
            self.q_norm.build(input_shape[:-1] + (query_width,))
            self.k_norm.build(input_shape[:-1] + (key_width,))
        self.built = True

    def _split_heads(self, x, num_heads):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, num_heads, self.head_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def _project(self, x):
        if not self.fused_projections:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        query_width = self.num_query_heads * self.head_dim
        key_width = self.num_key_value_heads * self.head_dim
        fused = self.qkv_proj(x)
        return (
            fused[..., :query_width],
            fused[..., query_width : query_width + key_width],
            fused[..., query_width + key_width :],
        )

    def _attend(self, x, cache, index, seed_cache, padding_mask):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        query, key, value = self._project(x)
        if self.query_key_norm == "projection":
            query, key = self.q_norm(query), self.k_norm(key)
        query = self._split_heads(query, self.num_query_heads)
        key = self._split_heads(key, self.num_key_value_heads)
        value = self._split_heads(value, self.num_key_value_heads)
        if self.query_key_norm == "head":
            query, key = self.q_norm(query), self.k_norm(key)
        if self.rotary_embedding is not None:
            query = self.rotary_embedding(query, index=index)
            key = self.rotary_embedding(key, index=index)
        attended, cache = self.attention(
            query,
            key,
            value,
            cache=cache,
            index=index,
            seed_cache=seed_cache,
            padding_mask=padding_mask,
        )
        attended = ops.reshape(
            ops.transpose(attended, (0, 2, 1, 3)),
            (batch, length, self.num_query_heads * self.head_dim),
        )
        return self.o_proj(attended), cache

    def _feed_forward(self, x):
        if self.mlp is not None:
            return self.mlp(x)
        if self.fused_projections:
            gate, up = ops.split(self.gate_up_proj(x), 2, axis=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(activate(gate, self.activation) * up)

    def call(
        self,
        x,
        cache=None,
        index=0,
        seed_cache=False,
        padding_mask=None,
        training=False,
    ):
        placement = self.norm_placement
        inputs = self.input_layernorm(x) if placement != "post" else x
        attended, cache = self._attend(inputs, cache, index, seed_cache, padding_mask)
        if placement != "pre":
            attended = self.post_attention_layernorm(attended)
        x = x + attended
        if placement == "pre":
            inputs = self.post_attention_layernorm(x)
        elif placement == "sandwich":
            inputs = self.pre_feedforward_layernorm(x)
        else:
            inputs = x
        outputs = self._feed_forward(inputs)
        if placement != "pre":
            outputs = self.post_feedforward_layernorm(outputs)
        return x + outputs, cache
