"""The Qwen3 backbone (dense and mixture-of-experts)."""

import keras

from keras_gen.models.decoder_backbone import DecoderBackbone


@keras.saving.register_keras_serializable(package="keras_gen")
class Qwen3Backbone(DecoderBackbone):
    """Qwen3: Llama's block with an RMSNorm on each query and key head.

    Qwen3-MoE is the same backbone with `num_experts`: routed experts of
    `expert_intermediate_dim` in every layer except `dense_layers`. The
    arguments are `DecoderBackbone`'s; `query_key_norm` defaults to
    `"head"`.

    Examples:
    >>> backbone = Qwen3Backbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32)
    >>> keras.ops.shape(backbone(keras.ops.ones((1, 5), dtype="int32")))
    (1, 5, 16)
    """

    def __init__(self, *args, query_key_norm="head", **kwargs):
        super().__init__(*args, query_key_norm=query_key_norm, **kwargs)
