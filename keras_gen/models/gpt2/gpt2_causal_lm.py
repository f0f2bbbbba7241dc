"""The GPT-2 causal language model."""

import keras

from keras_gen.models.causal_lm import CausalLM


@keras.saving.register_keras_serializable(package="keras_gen")
class GPT2CausalLM(CausalLM):
    """GPT-2 with generation: `CausalLM` over a `GPT2Backbone`.

    Args:
        backbone: a `keras_gen.models.GPT2Backbone`.
        tokenizer: optional tokenizer (`encode` / `decode`).

    Examples:
    >>> from keras_gen.models import GPT2Backbone
    >>> lm = GPT2CausalLM(GPT2Backbone(
    ...     vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=64))
    >>> len(lm.generate([[1, 2], [3]], max_new_tokens=3))
    2
    """
