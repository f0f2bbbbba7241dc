"""No repeated n-grams."""

from keras import ops

from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import count_tokens
from keras_gen.utils.checks import MAX_NGRAM_SIZE
from keras_gen.utils.checks import check_count


class NoRepeatNGram(LogitsProcessor):
    """Bans any token that would repeat an n-gram of the sequence so far.

    As transformers' `NoRepeatNGramLogitsProcessor`: the last `n - 1`
    tokens are looked up among all earlier n-grams (prompt included) and the
    tokens that completed them are banned. `n` enters the program as a
    tensor, so any `n` up to `MAX_NGRAM_SIZE` shares one program.

    Args:
        n: int in [1, 16], the n-gram size.

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> prompt = np.array([[1, 2, 1]], "int32")
    >>> mask = np.ones((1, 3), bool)
    >>> logits = np.zeros((1, 4), "float32")
    >>> np.asarray(NoRepeatNGram(2)(logits, prompt, 3, mask)).tolist()
    [[0.0, 0.0, -inf, 0.0]]
    """

    def __init__(self, n=3):
        self.n = n
        self.get_parameters()

    def get_parameters(self):
        n = check_count("n", self.n)
        if n > MAX_NGRAM_SIZE:
            raise ValueError(f"`n` must be <= {MAX_NGRAM_SIZE}. Received: n={n}")
        return {"n": n}

    def __call__(self, logits, prompt, index, mask):
        batch, length = ops.shape(prompt)
        prompt = ops.cast(prompt, "int32")
        # (rows or 1, 1) columns: one `n` and one position per row.
        n = ops.reshape(ops.cast(self.n, "int32"), (-1, 1))
        index = ops.reshape(ops.cast(index, "int32"), (-1, 1))
        padding = ops.full((batch, MAX_NGRAM_SIZE), -1, "int32")
        padded = ops.concatenate([prompt, padding], axis=1)
        # match[b, j]: the n-gram starting at j begins with the last n - 1
        # tokens of row b.
        match = ops.ones((batch, length), "bool")
        for t in range(MAX_NGRAM_SIZE - 1):
            position = ops.clip(index - n + 1 + t, 0, length - 1)
            current = ops.take_along_axis(
                prompt, ops.broadcast_to(position, (batch, 1)), axis=1
            )
            same = padded[:, t : t + length] == current
            match = ops.logical_and(match, ops.logical_or(same, t >= n - 1))
        starts = ops.arange(length, dtype="int32")[None, :]
        match = ops.logical_and(match, starts <= index - n)
        # The token that completed each matching n-gram is banned.
        ends = ops.broadcast_to(
            ops.clip(starts + n - 1, 0, length - 1), (batch, length)
        )
        completions = ops.take_along_axis(prompt, ends, axis=1)
        weights = ops.cast(match, "float32")
        banned = count_tokens(completions, weights, ops.shape(logits)[-1]) > 0
        return ops.where(banned, NEG_INF, logits)

    def get_config(self):
        return {"n": self.n}
