"""Frequency penalty (OpenAI semantics)."""

from keras import ops

from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import count_tokens
from keras_gen.processors.logits_processor import history
from keras_gen.utils.checks import check_number


class FrequencyPenalty(LogitsProcessor):
    """Subtracts `value` times its count from each generated token's logit.

    As OpenAI's `frequency_penalty`: a token generated three times loses
    `3 * value`; prompt tokens are not counted.

    Args:
        value: float in [-2, 2], as OpenAI and vLLM allow; positive
            discourages repetition, negative encourages it.

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> logits = np.zeros((1, 3), "float32")
    >>> prompt = np.array([[0, 1, 1]], "int32")
    >>> mask = np.array([[True, False, False]])
    >>> np.asarray(FrequencyPenalty(0.5)(logits, prompt, 3, mask)).tolist()
    [[0.0, -1.0, 0.0]]
    """

    def __init__(self, value=0.5):
        self.value = value
        self.get_parameters()

    def get_parameters(self):
        return {"value": check_number("value", self.value, -2, 2)}

    def __call__(self, logits, prompt, index, mask):
        weights = history(prompt, index, mask, generated_only=True)
        counts = count_tokens(prompt, weights, ops.shape(logits)[-1])
        return logits - counts * self.value

    def get_config(self):
        return {"value": self.value}
