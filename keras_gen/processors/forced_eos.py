"""Forced end token at the last position."""

from keras import ops

from keras_gen.kernels.filters import token_mask
from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import pad_ids
from keras_gen.utils.checks import check_count
from keras_gen.utils.checks import check_token_ids


class ForcedEOS(LogitsProcessor):
    """Forces an end token at each row's last position.

    At the last position every logit but the end token's becomes `-inf`
    (the end token's becomes 0), as transformers'
    `ForcedEOSTokenLogitsProcessor`.

    Args:
        eos_id: the end token id (or a list of them: all stay allowed).
        max_length: int or `None`. With `None` the last position is each
            row's own end in `generate` (`max_length` or prompt plus
            `max_new_tokens`); otherwise position `max_length - 1`.

    Call arguments:
        See `LogitsProcessor`; `end`, `(batch,)` or scalar, may also be
        given: the last position is `end - 1`.

    Examples:
    >>> import numpy as np
    >>> prompt, mask = np.array([[5, 5]], "int32"), np.ones((1, 2), bool)
    >>> logits = np.ones((1, 3), "float32")
    >>> np.asarray(ForcedEOS(0, max_length=3)(logits, prompt, 2, mask)).tolist()
    [[0.0, -inf, -inf]]
    """

    tunable_config = ("eos_id",)
    # Its id lists are padded with -1 (and lengths or biases with 0).
    resizable = True

    def __init__(self, eos_id, max_length=None):
        self.eos_id = check_token_ids("eos_id", eos_id)
        self.padded_ids = pad_ids(self.eos_id)
        self.max_length = check_count("max_length", max_length, allow_none=True)

    def get_parameters(self):
        parameters = {"padded_ids": self.padded_ids}
        if self.max_length is not None:
            parameters["max_length"] = self.max_length
        return parameters

    def get_token_ids(self):
        return self.eos_id

    def process(self, logits, loop):
        end = loop.end if self.max_length is None else None
        return self(logits, *self.inputs(logits, loop), end=end)

    def __call__(self, logits, prompt, index, mask, end=None):
        if end is None:
            end = ops.shape(prompt)[1] if self.max_length is None else self.max_length
        # (rows or 1, 1): a scalar, per-row ends or per-row `max_length`s.
        last = index == ops.reshape(ops.cast(end, "int32"), (-1, 1)) - 1
        allowed = token_mask(self.padded_ids, ops.shape(logits)[-1])
        return ops.where(last, ops.where(allowed, 0.0, NEG_INF), logits)

    def get_config(self):
        eos_id = self.eos_id[0] if len(self.eos_id) == 1 else self.eos_id
        return {"eos_id": eos_id, "max_length": self.max_length}
