"""The Mixtral backbone."""

import keras

from keras_gen.models.decoder_backbone import DecoderBackbone


@keras.saving.register_keras_serializable(package="keras_gen")
class MixtralBackbone(DecoderBackbone):
    """Mixtral: Mistral's block with 8 SwiGLU experts, 2 per token.

    The arguments are `DecoderBackbone`'s; `num_experts` defaults to 8 and
    `num_experts_per_token` to 2.

    Examples:
    >>> backbone = MixtralBackbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32,
    ...     num_experts=4)
    >>> keras.ops.shape(backbone(keras.ops.ones((1, 5), dtype="int32")))
    (1, 5, 16)
    """

    def __init__(self, *args, num_experts=8, num_experts_per_token=2, **kwargs):
        super().__init__(
            *args,
            num_experts=num_experts,
            num_experts_per_token=num_experts_per_token,
            **kwargs,
        )
