"""The Llama-family backbone (Llama, Mistral, Qwen2)."""

import keras

from keras_gen.models.decoder_backbone import DecoderBackbone


@keras.saving.register_keras_serializable(package="keras_gen")
class LlamaBackbone(DecoderBackbone):
    """Llama: rotary positions, RMSNorm, SwiGLU, grouped-query attention.

    One backbone covers the Llama family: Llama 2 and 3 (with Llama 3's
    rope scaling), Mistral (a sliding attention window) and Qwen2 (biases
    on the query/key/value projections, sliding windows on some layers).
    Its arguments are `DecoderBackbone`'s, with Llama's defaults.

    Examples:
    >>> backbone = LlamaBackbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32)
    >>> hidden = backbone(keras.ops.ones((1, 5), dtype="int32"))
    >>> keras.ops.shape(hidden)
    (1, 5, 16)
    """
