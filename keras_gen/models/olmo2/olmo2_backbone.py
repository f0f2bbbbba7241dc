"""The OLMo 2 backbone."""

import keras

from keras_gen.models.decoder_backbone import DecoderBackbone


@keras.saving.register_keras_serializable(package="keras_gen")
class Olmo2Backbone(DecoderBackbone):
    """OLMo 2: norms after attention and the MLP, query/key projection norms.

    The arguments are `DecoderBackbone`'s, with OLMo 2's defaults:
    `norm_placement="post"`, `query_key_norm="projection"`.

    Examples:
    >>> backbone = Olmo2Backbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32)
    >>> keras.ops.shape(backbone(keras.ops.ones((1, 5), dtype="int32")))
    (1, 5, 16)
    """

    def __init__(
        self, *args, norm_placement="post", query_key_norm="projection", **kwargs
    ):
        super().__init__(
            *args,
            norm_placement=norm_placement,
            query_key_norm=query_key_norm,
            **kwargs,
        )
