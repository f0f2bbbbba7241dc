"""The SmolLM3 causal language model."""

import keras

from keras_gen.models.causal_lm import CausalLM


@keras.saving.register_keras_serializable(package="keras_gen")
class SmolLM3CausalLM(CausalLM):
    """SmolLM3 with generation: `CausalLM` over a `SmolLM3Backbone`.

    Args:
        backbone: a `keras_gen.models.SmolLM3Backbone`.
        tokenizer: optional tokenizer (`encode` / `decode`).

    Examples:
    >>> from keras_gen.models import SmolLM3Backbone
    >>> lm = SmolLM3CausalLM(SmolLM3Backbone(
    ...     vocabulary_size=50, num_layers=4, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32))
    >>> len(lm.generate([[1, 2], [3]], max_new_tokens=3))
    2
    """
