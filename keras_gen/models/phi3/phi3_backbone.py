"""The Phi-3 backbone."""

import keras

from keras_gen.models.decoder_backbone import DecoderBackbone


@keras.saving.register_keras_serializable(package="keras_gen")
class Phi3Backbone(DecoderBackbone):
    """Phi-3: Llama's block with fused `qkv_proj` and `gate_up_proj`.

    The 128k-context variants rotate with LongRoPE
    (`rope_scaling={"rope_type": "longrope", ...}`, see `RotaryEmbedding`).
    The arguments are `DecoderBackbone`'s; `fused_projections` defaults to
    `True`.

    Examples:
    >>> backbone = Phi3Backbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32)
    >>> keras.ops.shape(backbone(keras.ops.ones((1, 5), dtype="int32")))
    (1, 5, 16)
    """

    def __init__(self, *args, fused_projections=True, **kwargs):
        super().__init__(*args, fused_projections=fused_projections, **kwargs)
