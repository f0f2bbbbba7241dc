"""The Gemma (1, 2 and 3) causal language model."""

import keras

from keras_gen.models.causal_lm import CausalLM


@keras.saving.register_keras_serializable(package="keras_gen")
class GemmaCausalLM(CausalLM):
    """Gemma (1, 2 and 3) with generation: `CausalLM` over a `GemmaBackbone`.

    Args:
        backbone: a `keras_gen.models.GemmaBackbone`.
        tokenizer: optional tokenizer (`encode` / `decode`).

    Examples:
    >>> from keras_gen.models import GemmaBackbone
    >>> lm = GemmaCausalLM(GemmaBackbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=1, hidden_dim=16, intermediate_dim=32, head_dim=8))
    >>> len(lm.generate([[1, 2], [3]], max_new_tokens=3))
    2
    """
