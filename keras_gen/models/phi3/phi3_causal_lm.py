"""The Phi-3 causal language model."""

import keras

from keras_gen.models.causal_lm import CausalLM


@keras.saving.register_keras_serializable(package="keras_gen")
class Phi3CausalLM(CausalLM):
    """Phi-3 with generation: `CausalLM` over a `Phi3Backbone`.

    Args:
        backbone: a `keras_gen.models.Phi3Backbone`.
        tokenizer: optional tokenizer (`encode` / `decode`).

    Examples:
    >>> from keras_gen.models import Phi3Backbone
    >>> lm = Phi3CausalLM(Phi3Backbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32))
    >>> len(lm.generate([[1, 2], [3]], max_new_tokens=3))
    2
    """
