"""The Llama-family backbone (Llama, Mistral, Qwen2)."""

import keras
from keras import ops

from keras_gen import layouts
from keras_gen.layers.rms_normalization import RMSNormalization
from keras_gen.layers.rotary_embedding import RotaryEmbedding
from keras_gen.models.backbone import Backbone
from keras_gen.models.llama.llama_block import LlamaBlock


class LlamaBackbone(Backbone):
    """Llama: rotary positions, RMSNorm, SwiGLU, grouped-query attention.

    One backbone covers the Llama family: Llama 2 and 3 (with Llama 3's
    rope scaling), Mistral (a sliding attention window) and Qwen2 (biases
    on the query/key/value projections, sliding windows on some layers).
    Layer names follow the Hugging Face checkpoint (`embed_tokens`,
    `layers_{i}`, `norm`, `lm_head`).

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
        dtype: a Keras dtype policy or name, e.g. `"bfloat16"`.

    Examples:
    >>> backbone = LlamaBackbone(
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
        layer_norm_epsilon=1e-6,
        query_key_value_bias=False,
        attention_output_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        sliding_window=None,
        sliding_window_layers=None,
        max_sequence_length=None,
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
        if sliding_window_layers is not None:
            sliding_window_layers = sorted(int(i) for i in sliding_window_layers)
            if any(not 0 <= i < num_layers for i in sliding_window_layers):
                raise ValueError(
                    f"`sliding_window_layers` must be layer indices in [0, "
                    f"{num_layers}). Received: {sliding_window_layers}"
                )
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_query_heads = num_query_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.head_dim = head_dim
        self.rope_max_wavelength = rope_max_wavelength
        self.rope_scaling = None if rope_scaling is None else dict(rope_scaling)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.query_key_value_bias = query_key_value_bias
        self.attention_output_bias = attention_output_bias
        self.mlp_bias = mlp_bias
        self.tie_word_embeddings = tie_word_embeddings
        self.sliding_window = sliding_window
        self.sliding_window_layers = sliding_window_layers
        self.max_sequence_length = max_sequence_length

        policy = self.dtype_policy
        self.embed_tokens = keras.layers.Embedding(
            vocabulary_size, hidden_dim, dtype=policy, name="embed_tokens"
        )
        self.rotary_embedding = RotaryEmbedding(
            head_dim,
            max_wavelength=rope_max_wavelength,
            scaling=rope_scaling,
            dtype=policy,
            name="rotary_embedding",
        )
        self.transformer_layers = [
            LlamaBlock(
                num_query_heads,
                num_key_value_heads,
                hidden_dim,
                intermediate_dim,
                head_dim,
                self.rotary_embedding,
                layer_norm_epsilon=layer_norm_epsilon,
                query_key_value_bias=query_key_value_bias,
                attention_output_bias=attention_output_bias,
                mlp_bias=mlp_bias,
                sliding_window=self.layer_sliding_window(i),
                dtype=policy,
                name=f"layers_{i}",
            )
            for i in range(num_layers)
        ]
        self.norm = RMSNormalization(layer_norm_epsilon, dtype=policy, name="norm")
        self.lm_head = None
        if not tie_word_embeddings:
            self.lm_head = keras.layers.Dense(
                vocabulary_size, use_bias=False, dtype=policy, name="lm_head"
            )
        self.build(None)

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
        return self.embed_tokens(token_ids)

    def final_norm(self, x):
        return self.norm(x)

    def compute_logits(self, hidden_states):
        if self.lm_head is None:
            return self.tied_logits(self.embed_tokens, hidden_states)
        return ops.cast(self.lm_head(hidden_states), "float32")

    @classmethod
    def get_layout_map(
        cls,
        device_mesh,
        model_parallel_dim_name="model",
        data_parallel_dim_name="batch",
    ):
        """Tensor-parallel layouts for the Llama family; see `Backbone`.

        `q_proj`, `k_proj`, `v_proj`, `gate_proj`, `up_proj`: column-parallel
        (output split over the model axis, so by heads); `o_proj`,
        `down_proj`: row-parallel. `embed_tokens` splits the hidden
        dimension, `lm_head` the vocabulary.

        The query heads must be divisible by the model axis size. When the
        key/value heads are not (e.g. 4 on a model axis of 8), `k_proj` and
        `v_proj` are still split by columns but the cache keeps all its
        key/value heads on every device of the model axis.
        """
        model = model_parallel_dim_name
        block = r"(.*/)?layers_\d+/"
        columns = r"(q_proj|k_proj|v_proj|gate_proj|up_proj)"
        rules = [
            (r"(.*/)?embed_tokens/embeddings", (None, model)),
            (r"(.*/)?lm_head/kernel", (None, model)),
            (block + columns + "/kernel", (None, model)),
            (block + columns + "/bias", (model,)),
            (block + r"(o_proj|down_proj)/kernel", (model, None)),
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
                "head_dim": self.head_dim,
                "rope_max_wavelength": self.rope_max_wavelength,
                "rope_scaling": self.rope_scaling,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "query_key_value_bias": self.query_key_value_bias,
                "attention_output_bias": self.attention_output_bias,
                "mlp_bias": self.mlp_bias,
                "tie_word_embeddings": self.tie_word_embeddings,
                "sliding_window": self.sliding_window,
                "sliding_window_layers": self.sliding_window_layers,
                "max_sequence_length": self.max_sequence_length,
            }
        )
        return config
