"""Minimum length: no stop token before it."""

from keras import ops

from keras_gen.kernels.filters import token_mask
from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import pad_ids
from keras_gen.utils.checks import check_count
from keras_gen.utils.checks import check_token_ids


def _or_zero(value):
    # Inside the program the limits are tensors; `None` (no limit) is 0.
    return 0 if value is None else value


class MinLength(LogitsProcessor):
    """Bans stop tokens until a row is long enough.

    As transformers' `MinLengthLogitsProcessor` (`min_length`: prompt plus
    new tokens) and `MinNewTokensLengthLogitsProcessor` (`min_new_tokens`,
    counted per row from its own prompt length). Both limits reach the
    program as tensors.

    Args:
        min_length: int >= 1 or `None`, the shortest total length.
        min_new_tokens: int >= 1 or `None`, the fewest new tokens.
        stop_token_ids: ids to ban, or `None` for the `stop_token_ids` of
            the `generate` call.

    Call arguments:
        See `LogitsProcessor`; `stop_token_ids` may also be given here.

    Examples:
    >>> import numpy as np
    >>> processor = MinLength(min_new_tokens=2, stop_token_ids=[0])
    >>> prompt, mask = np.array([[5, 5]], "int32"), np.array([[True, False]])
    >>> logits = np.zeros((1, 3), "float32")
    >>> np.asarray(processor(logits, prompt, 2, mask)).tolist()
    [[-inf, 0.0, 0.0]]
    """

    tunable_config = ("stop_token_ids",)
    # Its id lists are padded with -1 (and lengths or biases with 0).
    resizable = True

    def __init__(self, min_length=None, min_new_tokens=None, stop_token_ids=None):
        if min_length is None and min_new_tokens is None:
            raise ValueError("Give `min_length` or `min_new_tokens` (or both).")
        self.min_length = check_count("min_length", min_length, allow_none=True)
        self.min_new_tokens = check_count(
            "min_new_tokens", min_new_tokens, allow_none=True
        )
        self.stop_token_ids = stop_token_ids
        if stop_token_ids is not None:
            self.stop_token_ids = check_token_ids("stop_token_ids", stop_token_ids)
        self.padded_ids = (
            None if stop_token_ids is None else pad_ids(self.stop_token_ids)
        )

    def get_parameters(self):
        parameters = {
            "min_length": _or_zero(self.min_length),
            "min_new_tokens": _or_zero(self.min_new_tokens),
        }
        if self.padded_ids is not None:
            parameters["padded_ids"] = self.padded_ids
        return parameters

    def get_token_ids(self):
        return self.stop_token_ids or []

    def process(self, logits, loop):
        return self(
            logits, *self.inputs(logits, loop), stop_token_ids=loop.stop_token_ids
        )

    def __call__(self, logits, prompt, index, mask, stop_token_ids=None):
        if self.padded_ids is not None:
            stop_token_ids = self.padded_ids
        if stop_token_ids is None:
            raise ValueError("MinLength needs `stop_token_ids`.")
        prompt_length = ops.sum(ops.cast(mask, "int32"), axis=1, keepdims=True)
        short = ops.logical_or(  # (rows, 1)
            index < ops.cast(_or_zero(self.min_length), "int32"),
            index - prompt_length < ops.cast(_or_zero(self.min_new_tokens), "int32"),
        )
        banned = token_mask(stop_token_ids, ops.shape(logits)[-1])
        return ops.where(ops.logical_and(short, banned), NEG_INF, logits)

    def get_config(self):
        return {
            "min_length": self.min_length,
            "min_new_tokens": self.min_new_tokens,
            "stop_token_ids": self.stop_token_ids,
        }
