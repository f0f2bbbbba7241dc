"""A processor that writes a reply's first tokens: a random test model's
replies, made to say something."""

import numpy as np
from keras import ops

from keras_gen.processors import LogitsProcessor


class Script(LogitsProcessor):
    """Forces the first `len(token_ids)` new tokens of every row; the rest
    is the model's. A user's own processor, as the server registers them.

    Args:
        token_ids: the tokens each reply starts with.
    """

    def __init__(self, token_ids):
        self.token_ids = [int(t) for t in token_ids]

    def __call__(self, logits, prompt, index, mask):
        step = index - ops.sum(ops.cast(mask, "int32"), axis=1, keepdims=True)
        script = ops.convert_to_tensor(np.asarray(self.token_ids + [-1], "int32"))
        target = ops.take(script, ops.minimum(step, len(self.token_ids)), axis=0)
        vocabulary = ops.arange(ops.shape(logits)[-1], dtype="int32")[None, :]
        forced = ops.where(vocabulary == target, 0.0, float("-inf"))
        return ops.where(target >= 0, forced, logits)

    def get_token_ids(self):
        return self.token_ids

    def get_config(self):
        return {"token_ids": self.token_ids}
