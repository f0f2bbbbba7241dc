"""The base logits processor and the helpers the built-in ones share."""

import numpy as np
from keras import ops

from keras_gen import backend
from keras_gen.kernels import rows as rows_lib
from keras_gen.utils.tunable import Tunable

NEG_INF = float("-inf")


def pad_ids(token_ids, minimum=8):
    """`token_ids` padded with -1 to a power of two: a fixed-shape tensor."""
    size = max(minimum, 1 << max(len(token_ids) - 1, 0).bit_length())
    return np.asarray(list(token_ids) + [-1] * (size - len(token_ids)), "int32")


def pad_sequences(sequences, minimum=4):
    """`(slots, width)` int32 ids padded with -1 and `(slots,)` lengths.

    Both sizes are rounded up to powers of two, so a different set of
    sequences of similar size reuses the compiled program.
    """
    slots = len(pad_ids(list(range(len(sequences))), minimum))
    width = len(pad_ids(list(range(max(map(len, sequences)))), minimum))
    padded = np.full((slots, width), -1, "int32")
    lengths = np.zeros((slots,), "int32")
    for i, sequence in enumerate(sequences):
        padded[i, : len(sequence)] = sequence
        lengths[i] = len(sequence)
    return padded, lengths


def history(prompt, index, mask=None, generated_only=False):
    """`(batch, length)` float weights, 1 at the positions before `index`
    (a scalar, or a `(batch, 1)` column).

    With `generated_only`, prompt positions (`mask` True) are left out.
    """
    positions = ops.arange(ops.shape(prompt)[1], dtype="int32")[None, :]
    seen = ops.broadcast_to(positions < index, ops.shape(prompt))
    if generated_only:
        seen = ops.logical_and(seen, ops.logical_not(mask))
    return ops.cast(seen, "float32")


def count_tokens(prompt, weights, vocabulary_size):
    """`(batch, vocabulary_size)` counts of each token at weighted positions."""
    return backend.count_tokens(prompt, weights, vocabulary_size)


class LogitsProcessor(Tunable):
    """Base class for logits processors: change next-token logits, row by row.

    A processor is a pure, shape-preserving function of the logits and the
    token buffer. It runs inside the compiled generation loop, before the
    sampler's temperature, so it never slices by a data-dependent length
    (use masks) and never changes its inputs in place.

    The numbers a user tunes are returned by `get_parameters()` (Python
    numbers or numpy arrays of fixed shape). They reach the compiled program
    as tensors: inside it, `self.<name>` is a tensor, so changing them
    between calls never recompiles. Each row has its own: a number is a
    `(batch, 1)` column and an array of shape `(n,)` a `(batch, n)`
    tensor (`generate` gives every row the same values; the serving
    `Engine` gives each request's rows its own). Write arithmetic that
    broadcasts, as the examples below do, and the processor runs in both.
    Everything else the processor reads is program structure: keep it in
    `get_config()` so that a change compiles a new program.

    Call arguments:
        logits: `(batch, vocab)` float32 logits for position `index`.
        prompt: `(batch, length)` int32 token buffer; positions before
            `index` hold the sequence so far (prompt and generated tokens).
        index: `(batch, 1)` int32 column, each row's position being
            generated (rows of the engine stand at different positions).
            Called directly, a scalar works too.
        mask: `(batch, length)` bool, `True` where `prompt` holds prompt
            tokens.

    Examples:
    >>> from keras import ops
    >>> class BanToken(LogitsProcessor):
    ...     def __call__(self, logits, prompt, index, mask):
    ...         banned = ops.arange(ops.shape(logits)[-1]) == 3
    ...         return ops.where(banned[None, :], float("-inf"), logits)
    >>> class Scale(LogitsProcessor):  # a tunable number: `(batch, 1)`
    ...     def __init__(self, factor=1.0):
    ...         self.factor = factor
    ...     def get_parameters(self):
    ...         return {"factor": float(self.factor)}
    ...     def __call__(self, logits, prompt, index, mask):
    ...         return logits * self.factor
    ...     def get_config(self):
    ...         return {"factor": self.factor}
    """

    # A processor that keeps a per-row state in the loop (structured
    # output's automaton states) names its loop entry here; the loop starts
    # it with `initial_state` and moves it with `advance` at every token.
    state_key = None

    def __call__(self, logits, prompt, index, mask):
        raise NotImplementedError

    def for_request(self, request):
        """The processor one call runs: `self`, or a copy that holds what
        it needs of the call (its tokenizer, its rows).

        `request` is the call's `keras_gen.models.GenerationRequest`.
        """
        return self

    def initial_state(self, rows):
        """The `(rows, ...)` state of a stateful processor before step one."""
        raise NotImplementedError

    def constrain(self, processed, logits, loop):
        """A stateful processor applied last: to the `processed` logits,
        or, in rows where that leaves no token, to the unprocessed
        `logits`."""
        constrained = self.process(processed, loop)
        banned = ops.all(constrained == NEG_INF, axis=-1, keepdims=True)
        return ops.where(banned, self.process(logits, loop), constrained)

    def advance(self, state, token, moved):
        """The state after each row's new `(rows,)` `token`; rows where
        `moved` is `False` (prompt tokens, finished rows) keep theirs."""
        return state

    def process(self, logits, loop):
        """Apply to `logits` in the sampler loop; `loop` is its `LoopState`.

        Processors that need more of the loop (each row's `end`, the call's
        `stop_token_ids`) override this.
        """
        return self(logits, *self.inputs(logits, loop))

    def inputs(self, logits, loop):
        """`(prompt, index, mask)` of the call arguments, from `loop`:
        `index` as a `(batch, 1)` column."""
        index = rows_lib.column(loop.index, ops.shape(logits)[0])
        return loop.token_ids, index, loop.mask

    def get_token_ids(self):
        """Token ids this processor refers to; `generate` checks them."""
        return []

    def check_vocabulary(self, vocabulary_size):
        bad = [t for t in self.get_token_ids() if not 0 <= t < vocabulary_size]
        if bad:
            raise ValueError(
                f"{type(self).__name__} refers to token ids outside the "
                f"vocabulary [0, {vocabulary_size}): {sorted(set(bad))[:5]}"
            )

    @classmethod
    def from_config(cls, config):
        return cls(**config)
