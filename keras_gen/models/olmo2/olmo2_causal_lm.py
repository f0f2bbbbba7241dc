"""The OLMo 2 causal language model."""

import keras

from keras_gen.models.causal_lm import CausalLM


@keras.saving.register_keras_serializable(package="keras_gen")
class Olmo2CausalLM(CausalLM):
    """OLMo 2 with generation: `CausalLM` over a `Olmo2Backbone`.

    Args:
        backbone: a `keras_gen.models.Olmo2Backbone`.
        tokenizer: optional tokenizer (`encode` / `decode`).

    Examples:
    >>> from keras_gen.models import Olmo2Backbone
    >>> lm = Olmo2CausalLM(Olmo2Backbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32))
    >>> len(lm.generate([[1, 2], [3]], max_new_tokens=3))
    2
    """
