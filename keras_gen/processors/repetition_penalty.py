"""Repetition penalty (transformers' semantics)."""

from keras import ops

from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import count_tokens
from keras_gen.processors.logits_processor import history
from keras_gen.utils.checks import check_number


class RepetitionPenalty(LogitsProcessor):
    """Makes tokens already in the sequence (prompt included) less likely.

    The logit of every token seen so far is divided by `penalty` when
    positive and multiplied by it when negative, as in transformers'
    `RepetitionPenaltyLogitsProcessor` (Keskar et al., 2019).

    Args:
        penalty: float in [0.01, 100]. Above 1 discourages repetition,
            below 1 encourages it, 1 changes nothing. (Outside that range
            the divided logits overflow or stop meaning anything.)

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> processor = RepetitionPenalty(2.0)
    >>> logits = np.array([[1.0, -1.0, 1.0]], "float32")
    >>> prompt = np.array([[0, 1]], "int32")
    >>> mask = np.array([[True, True]])
    >>> np.asarray(processor(logits, prompt, 2, mask)).tolist()
    [[0.5, -2.0, 1.0]]
    """

    def __init__(self, penalty=1.2):
        self.penalty = penalty
        self.get_parameters()

    def get_parameters(self):
        return {"penalty": check_number("penalty", self.penalty, 0.01, 100)}

    def __call__(self, logits, prompt, index, mask):
        vocabulary_size = ops.shape(logits)[-1]
        seen = count_tokens(prompt, history(prompt, index), vocabulary_size) > 0
        penalized = ops.where(logits < 0, logits * self.penalty, logits / self.penalty)
        return ops.where(seen, penalized, logits)

    def get_config(self):
        return {"penalty": self.penalty}
