"""The GPT-2 backbone."""

import keras
from keras import ops

from keras_gen import layouts
from keras_gen.layers.dropout import Dropout
from keras_gen.layers.embedding import Embedding
from keras_gen.layers.layer_normalization import LayerNormalization
from keras_gen.models.backbone import Backbone
from keras_gen.models.gpt2.gpt2_block import GPT2Block


@keras.saving.register_keras_serializable(package="keras_gen")
class GPT2Backbone(Backbone):
    """GPT-2: learned positions, pre-norm blocks, gelu, tied output embedding.

    Layer names follow the Hugging Face checkpoint (`wte`, `wpe`, `h_{i}`,
    `ln_f`) so that converting weights is a direct copy.

    Args:
        vocabulary_size: int, tokens in the vocabulary.
        num_layers: int, transformer blocks.
        num_heads: int, attention heads per block.
        hidden_dim: int, the model width.
        intermediate_dim: int, the MLP width.
        max_sequence_length: int, learned positions (the longest sequence).
        dropout: float, dropout rate during training.
        layer_norm_epsilon: float.
        dtype: a Keras dtype policy or name, e.g. `"bfloat16"`.

    Examples:
    >>> backbone = GPT2Backbone(
    ...     vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=64)
    >>> hidden = backbone(keras.ops.ones((1, 5), dtype="int32"))
    >>> keras.ops.shape(hidden)
    (1, 5, 16)
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_sequence_length=1024,
        dropout=0.0,
        layer_norm_epsilon=1e-5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_dim % num_heads:
            raise ValueError(
                "`hidden_dim` must be divisible by `num_heads`. Received: "
                f"hidden_dim={hidden_dim}, num_heads={num_heads}"
            )
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.num_key_value_heads = num_heads
        self.hidden_dim = hidden_dim
        self.head_dim = hidden_dim // num_heads
        self.intermediate_dim = intermediate_dim
        self.max_sequence_length = max_sequence_length
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon

        policy = self.dtype_policy
        self.wte = Embedding(vocabulary_size, hidden_dim, dtype=policy, name="wte")
        self.wpe = Embedding(max_sequence_length, hidden_dim, dtype=policy, name="wpe")
        self.embeddings_dropout = Dropout(dropout, dtype=policy)
        self.transformer_layers = [
            GPT2Block(
                num_heads,
                hidden_dim,
                intermediate_dim,
                dropout=dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=policy,
                name=f"h_{i}",
            )
            for i in range(num_layers)
        ]
        self.ln_f = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="ln_f"
        )
        self.build_weights()

    def build(self, input_shape):
        self.wte.build((None, None))
        self.wpe.build((None,))
        for block in self.transformer_layers:
            block.build((None, None, self.hidden_dim))
        self.ln_f.build((None, None, self.hidden_dim))
        self.built = True

    def embed(self, token_ids, index, training=False):
        length = ops.shape(token_ids)[1]
        if len(getattr(index, "shape", ())) == 1:
            # Per-row positions (batch, length). Speculative decoding may
            # look past the last position, and left padding starts before
            # the first; those tokens are never kept.
            positions = index[:, None] + ops.arange(length, dtype="int32")
            positions = ops.clip(positions, 0, self.max_sequence_length - 1)
            return self.embeddings_dropout(
                self.wte(token_ids) + self.wpe(positions), training=training
            )
        positions = index + ops.arange(length, dtype="int32")
        x = self.wte(token_ids) + self.wpe(positions)[None]
        return self.embeddings_dropout(x, training=training)

    def default_lora_targets(self):
        return ("c_attn",)

    def final_norm(self, x):
        return self.ln_f(x)

    def compute_logits(self, hidden_states):
        return self.tied_logits(self.wte, hidden_states)

    @classmethod
    def get_layout_map(
        cls,
        device_mesh,
        model_parallel_dim_name="model",
        data_parallel_dim_name="batch",
    ):
        """Tensor-parallel layouts for GPT-2; see `Backbone.get_layout_map`.

        `c_attn`, `c_fc`: column-parallel (output split over the model
        axis); `c_proj`, `mlp_c_proj`: row-parallel (input split), so each
        block needs one all-reduce after attention and one after the MLP.
        `wte` (also the tied output head) and `wpe` split the hidden
        dimension, which the model axis always divides when it divides the
        heads (GPT-2's vocabulary of 50257 divides by nothing useful).

        The fused `c_attn` kernel `(hidden, 3 * hidden)` stays in the
        checkpoint's layout, so its column split gives each device a
        contiguous run of the `[q | k | v]` columns, not the same heads of
        q, k and v. `CachedAttention` constrains q, k and v to be split by
        heads, so XLA moves the `(batch, length, 3 * hidden)` activations
        into head order once per block (a small collective, not a copy of
        weights); attention and the cache are then split by heads. Every
        weight is stored once across the model axis.

        The model built under the distribution fits each rule to its
        weight: a dimension the model axis does not divide is whole on
        every device (an embedding then splits its rows if they divide).
        """
        model = model_parallel_dim_name
        block = r"(.*/)?h_\d+/"
        rules = [
            (r"(.*/)?(wte|wpe)/embeddings", [(None, model), (model, None)]),
            (block + r"(c_attn|c_fc)/kernel", (None, model)),
            (block + r"(c_attn|c_fc)/bias", (model,)),
            (block + r"(c_proj|mlp_c_proj)/kernel", (model, None)),
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
                "num_heads": self.num_heads,
                "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim,
                "max_sequence_length": self.max_sequence_length,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config
