"""The Llama-family causal language model."""

import keras

from keras_gen.models.causal_lm import CausalLM


@keras.saving.register_keras_serializable(package="keras_gen")
class LlamaCausalLM(CausalLM):
    """Llama, Mistral or Qwen2 with generation: `CausalLM` over a `LlamaBackbone`.

    Args:
        backbone: a `keras_gen.models.LlamaBackbone`.
        tokenizer: optional tokenizer (`encode` / `decode`).

    Examples:
    >>> from keras_gen.models import LlamaBackbone
    >>> lm = LlamaCausalLM(LlamaBackbone(
    ...     vocabulary_size=50, num_layers=2, num_query_heads=4,
    ...     num_key_value_heads=2, hidden_dim=16, intermediate_dim=32))
    >>> len(lm.generate([[1, 2], [3]], max_new_tokens=3))
    2
    """
