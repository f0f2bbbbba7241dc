"""Suppressed tokens."""

from keras import ops

from keras_gen.kernels.filters import token_mask
from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import pad_ids
from keras_gen.utils.checks import check_token_ids


class SuppressTokens(LogitsProcessor):
    """Sets the logits of the given tokens to `-inf` at every step.

    Args:
        token_ids: list of token ids never to generate. They reach the
            program as a padded tensor: a new list does not recompile.

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> prompt, mask = np.array([[0]], "int32"), np.ones((1, 1), bool)
    >>> logits = np.zeros((1, 3), "float32")
    >>> np.asarray(SuppressTokens([1])(logits, prompt, 1, mask)).tolist()
    [[0.0, -inf, 0.0]]
    """

    tunable_config = ("token_ids",)
    # Its id lists are padded with -1 (and lengths or biases with 0).
    resizable = True

    def __init__(self, token_ids):
        self.token_ids = check_token_ids("token_ids", token_ids)
        self.padded_ids = pad_ids(self.token_ids)

    def get_parameters(self):
        return {"padded_ids": self.padded_ids}

    def get_token_ids(self):
        return self.token_ids

    def __call__(self, logits, prompt, index, mask):
        banned = token_mask(self.padded_ids, ops.shape(logits)[-1])
        return ops.where(banned, NEG_INF, logits)

    def get_config(self):
        return {"token_ids": self.token_ids}
