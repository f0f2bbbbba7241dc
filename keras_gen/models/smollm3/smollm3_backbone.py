"""The SmolLM3 backbone."""

import keras

from keras_gen.models.decoder_backbone import DecoderBackbone


@keras.saving.register_keras_serializable(package="keras_gen")
class SmolLM3Backbone(DecoderBackbone):
    """SmolLM3: Llama's blocks, every 4th of them without RoPE (NoPE).

    The arguments are `DecoderBackbone`'s; `no_rope_layers` defaults to
    every 4th layer (3, 7, 11, ...), as SmolLM3's config does.

    Examples:
    >>> backbone = SmolLM3Backbone(
    ...     vocabulary_size=50, num_layers=4, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32)
    >>> backbone.no_rope_layers
    [3]
    >>> keras.ops.shape(backbone(keras.ops.ones((1, 5), dtype="int32")))
    (1, 5, 16)
    """

    def __init__(
        self, vocabulary_size, num_layers, *args, no_rope_layers=None, **kwargs
    ):
        if no_rope_layers is None:
            no_rope_layers = [i for i in range(num_layers) if (i + 1) % 4 == 0]
        super().__init__(
            vocabulary_size, num_layers, *args, no_rope_layers=no_rope_layers, **kwargs
        )
