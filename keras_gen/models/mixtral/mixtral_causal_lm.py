"""The Mixtral causal language model."""

import keras

from keras_gen.models.causal_lm import CausalLM


@keras.saving.register_keras_serializable(package="keras_gen")
class MixtralCausalLM(CausalLM):
    """Mixtral with generation: `CausalLM` over a `MixtralBackbone`.

    Args:
        backbone: a `keras_gen.models.MixtralBackbone`.
        tokenizer: optional tokenizer (`encode` / `decode`).

    Examples:
    >>> from keras_gen.models import MixtralBackbone
    >>> lm = MixtralCausalLM(MixtralBackbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32,
    ...     num_experts=4))
    >>> len(lm.generate([[1, 2], [3]], max_new_tokens=3))
    2
    """
