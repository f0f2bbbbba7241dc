"""The Gemma backbone (Gemma 1, 2 and 3, text)."""

import keras

from keras_gen.models.decoder_backbone import DecoderBackbone


@keras.saving.register_keras_serializable(package="keras_gen")
class GemmaBackbone(DecoderBackbone):
    """Gemma: GeGLU, `(1 + w)` RMSNorms, embeddings scaled by `sqrt(hidden)`.

    Gemma 2 adds norms after attention and the MLP (`norm_placement=
    "sandwich"`), attention and final-logit soft-capping, alternating
    sliding-window layers and `query_pre_attention_scalar`; Gemma 3 adds
    query/key norms and a second rope base for its sliding-window layers
    (`local_rope_max_wavelength`). The arguments are `DecoderBackbone`'s,
    with Gemma's defaults: `activation="gelu_approximate"`,
    `norm_unit_offset=True`, `scale_embeddings=True`,
    `tie_word_embeddings=True`.

    Examples:
    >>> backbone = GemmaBackbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=1, hidden_dim=16, intermediate_dim=32,
    ...     head_dim=8)
    >>> keras.ops.shape(backbone(keras.ops.ones((1, 5), dtype="int32")))
    (1, 5, 16)
    """

    def __init__(
        self,
        *args,
        activation="gelu_approximate",
        norm_unit_offset=True,
        scale_embeddings=True,
        tie_word_embeddings=True,
        **kwargs,
    ):
        super().__init__(
            *args,
            activation=activation,
            norm_unit_offset=norm_unit_offset,
            scale_embeddings=scale_embeddings,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
