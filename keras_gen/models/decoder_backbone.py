"""The backbone of every rotary decoder family: options, not copies."""

import math

import keras
from keras import ops

from keras_gen import layouts
from keras_gen.layers.decoder_block import DecoderBlock
from keras_gen.layers.dense import Dense
from keras_gen.layers.embedding import Embedding
from keras_gen.layers.rms_normalization import RMSNormalization
from keras_gen.layers.rotary_embedding import RotaryEmbedding
from keras_gen.models.backbone import Backbone

# The options after the sizes, with their defaults (Llama's): a family's
# backbone is this class with some of them fixed.
OPTIONS = {
    "head_dim": None,
    "rope_max_wavelength": 10000.0,
    "rope_scaling": None,
    "rope_partial_rotary_factor": 1.0,
    "layer_norm_epsilon": 1e-6,
    "query_key_value_bias": False,
    "attention_output_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "sliding_window": None,
    "sliding_window_layers": None,
    "max_sequence_length": None,
    "activation": "silu",
    "norm_placement": "pre",
    "norm_unit_offset": False,
    "query_key_norm": None,
    "scale_embeddings": False,
    "query_pre_attention_scalar": None,
    "attention_logit_softcap": None,
    "final_logit_softcap": None,
    "local_rope_max_wavelength": None,
    "fused_projections": False,
    "num_experts": None,
    "num_experts_per_token": 2,
    "expert_intermediate_dim": None,
    "normalize_expert_weights": True,
    "dense_layers": None,
    "no_rope_layers": None,
}


@keras.saving.register_keras_serializable(package="keras_gen")
class DecoderBackbone(Backbone):
    """Rotary positions, RMSNorm, a gated MLP, grouped-query attention.

    The shared backbone of the decoder families: Llama 2 and 3, Mistral,
    Qwen 2 and 3 (and Qwen3-MoE), Gemma 1 to 3, Phi-3, OLMo 2 and Mixtral
    are this class with different options; each family's backbone
    (`LlamaBackbone`, `GemmaBackbone`, ...) fixes its own. Layer names
    follow the Hugging Face checkpoints (`embed_tokens`, `layers_{i}`,
    `norm`, `lm_head`; the blocks are `DecoderBlock`s).

    Args:
        vocabulary_size: int, tokens in the vocabulary.
        num_layers: int, transformer blocks.
        num_query_heads: int, attention heads for queries.
        num_key_value_heads: int, heads for keys and values; divides
            `num_query_heads` (grouped-query attention).
        hidden_dim: int, the model width.
        intermediate_dim: int, the MLP width.
        head_dim: int, the size of each head; defaults to
            `hidden_dim // num_query_heads`.
        rope_max_wavelength: float, the RoPE base (`rope_theta`).
        rope_scaling: `None` or a dict, see `RotaryEmbedding`'s `scaling`.
        rope_partial_rotary_factor: float, the leading share of each head
            that rotates (see `RotaryEmbedding`'s `partial_rotary_factor`).
        layer_norm_epsilon: float.
        query_key_value_bias: bool, biases on the query, key and value
            projections (Qwen2, or Llama's `attention_bias`).
        attention_output_bias: bool, a bias on the attention output
            projection (Llama's `attention_bias`).
        mlp_bias: bool, biases on the MLP projections.
        tie_word_embeddings: bool, whether the output projection is the
            transposed token embedding.
        sliding_window: `None` or int: each token attends to this many
            recent positions, itself included.
        sliding_window_layers: `None` (every layer, when `sliding_window`
            is set) or a list of the layer indices that use the window.
        max_sequence_length: `None` or int, the longest sequence to
            generate (`max_position_embeddings`).
        activation: `"silu"` (SwiGLU) or `"gelu_approximate"` (GeGLU, Gemma).
        norm_placement: `"pre"`, `"sandwich"` (Gemma 2, 3) or `"post"`
            (OLMo 2): see `keras_gen.layers.decoder_block`.
        norm_unit_offset: bool, every norm scales by `1 + w` (Gemma).
        query_key_norm: `None`, `"head"` (Qwen3, Gemma 3: RMSNorm of each
            query and key head) or `"projection"` (OLMo 2: of the whole
            query and key projections).
        scale_embeddings: bool, multiply token embeddings by
            `sqrt(hidden_dim)` (Gemma).
        query_pre_attention_scalar: `None` or float `s`: attention scores
            are scaled by `1 / sqrt(s)` instead of `1 / sqrt(head_dim)`.
        attention_logit_softcap: `None` or float, caps attention scores
            with `c * tanh(x / c)` (Gemma 2).
        final_logit_softcap: `None` or float, caps the output logits the
            same way (Gemma 2).
        local_rope_max_wavelength: `None` or float: the sliding-window
            layers rotate with this base and no scaling (Gemma 3), the
            others with `rope_max_wavelength` and `rope_scaling`.
        fused_projections: bool, fused `qkv_proj` and `gate_up_proj`
            (Phi-3).
        num_experts: `None` (dense MLPs) or int: the MLP of every layer not
            in `dense_layers` is a `MixtureOfExperts` (Mixtral, Qwen3-MoE).
        num_experts_per_token: int, the experts each token is routed to.
        expert_intermediate_dim: `None` (`intermediate_dim`) or int, the
            width of each expert.
        normalize_expert_weights: bool, renormalize the chosen experts'
            weights to sum to one.
        dense_layers: `None` or a list of layer indices that keep a dense
            MLP of `intermediate_dim` when `num_experts` is set.
        no_rope_layers: `None` or a list of the layer indices whose
            attention has no position encoding (SmolLM3's NoPE layers,
            every 4th).
        dtype: a Keras dtype policy or name, e.g. `"bfloat16"`.

    Examples:
    >>> backbone = DecoderBackbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32)
    >>> hidden = backbone(keras.ops.ones((1, 5), dtype="int32"))
    >>> keras.ops.shape(hidden)
    (1, 5, 16)
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_query_heads,
        num_key_value_heads,
        hidden_dim,
        intermediate_dim,
        head_dim=None,
        rope_max_wavelength=10000.0,
        rope_scaling=None,
        rope_partial_rotary_factor=1.0,
        layer_norm_epsilon=1e-6,
        query_key_value_bias=False,
        attention_output_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        sliding_window=None,
        sliding_window_layers=None,
        max_sequence_length=None,
        activation="silu",
        norm_placement="pre",
        norm_unit_offset=False,
        query_key_norm=None,
        scale_embeddings=False,
        query_pre_attention_scalar=None,
        attention_logit_softcap=None,
        final_logit_softcap=None,
        local_rope_max_wavelength=None,
        fused_projections=False,
        num_experts=None,
        num_experts_per_token=2,
        expert_intermediate_dim=None,
        normalize_expert_weights=True,
        dense_layers=None,
        no_rope_layers=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if num_query_heads % num_key_value_heads:
            raise ValueError(
                "`num_query_heads` must be divisible by `num_key_value_heads`. "
                f"Received: num_query_heads={num_query_heads}, "
                f"num_key_value_heads={num_key_value_heads}"
            )
        if head_dim is None:
            if hidden_dim % num_query_heads:
                raise ValueError(
                    "Give `head_dim` when `hidden_dim` is not divisible by "
                    f"`num_query_heads`. Received: hidden_dim={hidden_dim}, "
                    f"num_query_heads={num_query_heads}"
                )
            head_dim = hidden_dim // num_query_heads
        sliding_window_layers = _layer_indices(
            "sliding_window_layers", sliding_window_layers, num_layers
        )
        dense_layers = _layer_indices("dense_layers", dense_layers, num_layers)
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_query_heads = num_query_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.head_dim = head_dim
        self.rope_max_wavelength = rope_max_wavelength
        self.rope_scaling = None if rope_scaling is None else dict(rope_scaling)
        self.rope_partial_rotary_factor = rope_partial_rotary_factor
        self.layer_norm_epsilon = layer_norm_epsilon
        self.query_key_value_bias = query_key_value_bias
        self.attention_output_bias = attention_output_bias
        self.mlp_bias = mlp_bias
        self.tie_word_embeddings = tie_word_embeddings
        self.sliding_window = sliding_window
        self.sliding_window_layers = sliding_window_layers
        self.max_sequence_length = max_sequence_length
        self.activation = activation
        self.norm_placement = norm_placement
        self.norm_unit_offset = norm_unit_offset
        self.query_key_norm = query_key_norm
        self.scale_embeddings = scale_embeddings
        self.query_pre_attention_scalar = query_pre_attention_scalar
        self.attention_logit_softcap = attention_logit_softcap
        self.final_logit_softcap = final_logit_softcap
        self.local_rope_max_wavelength = local_rope_max_wavelength
        self.fused_projections = fused_projections
        self.num_experts = num_experts
        self.num_experts_per_token = num_experts_per_token
        self.expert_intermediate_dim = expert_intermediate_dim
        self.normalize_expert_weights = normalize_expert_weights
        self.dense_layers = dense_layers
        self.no_rope_layers = _layer_indices(
            "no_rope_layers", no_rope_layers, num_layers
        )

        policy = self.dtype_policy
        self.embed_tokens = Embedding(
            vocabulary_size, hidden_dim, dtype=policy, name="embed_tokens"
        )
        self.rotary_embedding = RotaryEmbedding(
            head_dim,
            max_wavelength=rope_max_wavelength,
            scaling=rope_scaling,
            partial_rotary_factor=rope_partial_rotary_factor,
            dtype=policy,
            name="rotary_embedding",
        )
        self.local_rotary_embedding = None
        if local_rope_max_wavelength is not None:
            self.local_rotary_embedding = RotaryEmbedding(
                head_dim,
                max_wavelength=local_rope_max_wavelength,
                dtype=policy,
                name="local_rotary_embedding",
            )
        self.transformer_layers = [self._block(i) for i in range(num_layers)]
        self.norm = RMSNormalization(
            layer_norm_epsilon, unit_offset=norm_unit_offset, dtype=policy, name="norm"
        )
        self.lm_head = None
        if not tie_word_embeddings:
            self.lm_head = Dense(
                vocabulary_size, use_bias=False, dtype=policy, name="lm_head"
            )
        self.build_weights()

    def _block(self, i):
        window = self.layer_sliding_window(i)
        rotary = self.rotary_embedding
        if window is not None and self.local_rotary_embedding is not None:
            rotary = self.local_rotary_embedding
        if self.no_rope_layers is not None and i in self.no_rope_layers:
            rotary = None
        experts = self.num_experts
        if self.dense_layers is not None and i in self.dense_layers:
            experts = None
        scalar = self.query_pre_attention_scalar
        return DecoderBlock(
            self.num_query_heads,
            self.num_key_value_heads,
            self.hidden_dim,
            self.intermediate_dim
            if experts is None
            else self.expert_intermediate_dim or self.intermediate_dim,
            self.head_dim,
            rotary,
            layer_norm_epsilon=self.layer_norm_epsilon,
            activation=self.activation,
            norm_placement=self.norm_placement,
            norm_unit_offset=self.norm_unit_offset,
            query_key_norm=self.query_key_norm,
            query_key_value_bias=self.query_key_value_bias,
            attention_output_bias=self.attention_output_bias,
            mlp_bias=self.mlp_bias,
            fused_projections=self.fused_projections,
            sliding_window=window,
            attention_scale=None if scalar is None else 1.0 / math.sqrt(scalar),
            attention_logit_softcap=self.attention_logit_softcap,
            num_experts=experts,
            num_experts_per_token=self.num_experts_per_token,
            normalize_expert_weights=self.normalize_expert_weights,
            dtype=self.dtype_policy,
            name=f"layers_{i}",
        )

    def layer_sliding_window(self, i):
        """The attention window of layer `i`: an int, or `None` for none."""
        layers = self.sliding_window_layers
        if layers is None or i in layers:
            return self.sliding_window
        return None

    def build(self, input_shape):
        hidden_shape = (None, None, self.hidden_dim)
        self.embed_tokens.build((None, None))
        for block in self.transformer_layers:
            block.build(hidden_shape)
        self.norm.build(hidden_shape)
        if self.lm_head is not None:
            self.lm_head.build(hidden_shape)
        self.built = True

    def embed(self, token_ids, index, training=False):
        # Positions enter through the rotary embedding inside each block.
        x = self.embed_tokens(token_ids)
        if self.scale_embeddings:
            x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        return x

    def default_lora_targets(self):
        if self.transformer_layers[0].fused_projections:
            return ("qkv_proj",)
        return super().default_lora_targets()

    def final_norm(self, x):
        return self.norm(x)

    def compute_logits(self, hidden_states):
        if self.lm_head is None:
            logits = self.tied_logits(self.embed_tokens, hidden_states)
        else:
            logits = ops.cast(self.lm_head(hidden_states), "float32")
        cap = self.final_logit_softcap
        if cap is not None:
            logits = ops.tanh(logits / cap) * cap
        return logits

    @classmethod
    def get_layout_map(
        cls,
        device_mesh,
        model_parallel_dim_name="model",
        data_parallel_dim_name="batch",
    ):
        """Tensor-parallel layouts for the decoder families; see `Backbone`.

        `q_proj`, `k_proj`, `v_proj`, `gate_proj`, `up_proj` (and the fused
        `qkv_proj`, `gate_up_proj`): column-parallel (output split over the
        model axis, so by heads); `o_proj`, `down_proj`: row-parallel.
        Experts split their MLP width the same way; the router is whole.
        `embed_tokens` splits the hidden dimension, `lm_head` the
        vocabulary, or the hidden dimension where the model axis does not
        divide the vocabulary (a vocabulary of 300 on 8 devices: each
        device then holds `hidden / 8` rows of the head, and the logits are
        summed across the model axis; the same memory as a vocabulary
        split, with nothing padded).

        The model built under the distribution fits each rule to its
        weight: a dimension the model axis does not divide (key/value
        columns of 3 heads on 8 devices, say) is whole on every device.
        Attention and the cache are split by heads where the model axis
        divides the (key/value) heads, and whole otherwise.
        """
        model = model_parallel_dim_name
        block = r"(.*/)?layers_\d+/"
        columns = r"(q_proj|k_proj|v_proj|qkv_proj|gate_proj|up_proj|gate_up_proj)"
        rules = [
            (r"(.*/)?embed_tokens/embeddings", [(None, model), (model, None)]),
            (r"(.*/)?lm_head/kernel", [(None, model), (model, None)]),
            (block + r"mlp/router/kernel", (None, None)),
            (block + columns + "/kernel", (None, model)),
            (block + columns + "/bias", (model,)),
            (block + r"(o_proj|down_proj)/kernel", (model, None)),
            (block + r"mlp/(gate_kernel|up_kernel)", (None, None, model)),
            (block + r"mlp/down_kernel", (None, model, None)),
        ]
        return layouts.make_layout_map(
            device_mesh, rules, model, data_parallel_dim_name
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_layers": self.num_layers,
                "num_query_heads": self.num_query_heads,
                "num_key_value_heads": self.num_key_value_heads,
                "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim,
                **{name: getattr(self, name) for name in OPTIONS},
            }
        )
        return config


def _layer_indices(name, indices, num_layers):
    if indices is None:
        return None
    indices = sorted(int(i) for i in indices)
    if any(not 0 <= i < num_layers for i in indices):
        raise ValueError(
            f"`{name}` must be layer indices in [0, {num_layers}). Received: {indices}"
        )
    return indices
