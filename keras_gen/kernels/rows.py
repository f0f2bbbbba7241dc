"""Positions that are one scalar for every row, or one per row.

`generate` advances every row of a batch together: the loop's `index` is a
scalar tensor. The serving engine's slots each stand at their own position:
`index` is `(rows,)`. Samplers and processors read and write through these
helpers, so that one step serves both.
"""

from keras import ops

from keras_gen import backend


def per_row(index):
    """Whether `index` holds one position per row (a `(rows,)` tensor)."""
    return len(getattr(index, "shape", ())) == 1


def column(index, rows):
    """`index` as a `(rows, 1)` int32 column: it broadcasts against
    `(rows, vocab)` logits and `(rows, length)` buffers alike."""
    index = ops.cast(index, "int32")
    if per_row(index):
        return index[:, None]
    return ops.broadcast_to(ops.reshape(index, (1, 1)), (rows, 1))


def read(buffer, index):
    """`(rows, ...)`: each row's entry of a `(rows, length, ...)` buffer at
    `index` (clipped into the buffer)."""
    if not per_row(index):
        return backend.slice(buffer, index, 1, axis=1)[:, 0]
    at = ops.clip(ops.cast(index, "int32"), 0, ops.shape(buffer)[1] - 1)
    at = ops.reshape(at, (-1, 1) + (1,) * (len(ops.shape(buffer)) - 2))
    return ops.take_along_axis(buffer, at, axis=1)[:, 0]


def write(buffer, value, index, keep=None):
    """`buffer` with each row's `(rows, ...)` `value` written at `index`.

    Per-row positions are clipped into the buffer, and rows where `keep`
    (`(rows,)` bool) holds write back what they hold: a finished slot
    stands still at its last position and must not change it.
    """
    value = ops.cast(value, buffer.dtype)
    if not per_row(index):
        return backend.update_slice(buffer, value[:, None], index, 1)
    at = ops.clip(ops.cast(index, "int32"), 0, ops.shape(buffer)[1] - 1)
    if keep is not None:
        keep = ops.reshape(keep, (-1,) + (1,) * (len(ops.shape(value)) - 1))
        value = ops.where(keep, read(buffer, at), value)
    return backend.update_rows(buffer, value[:, None], at, axis=1)


def advance(index, moved):
    """The next position: every row's together, or each row that `moved`
    (`(rows,)` bool) by one."""
    if not per_row(index):
        return index + 1
    return index + ops.cast(moved, "int32")


def step_seeds(seeds, index):
    """`(rows, 2)` keys of one step: the rows' keys offset by the position."""
    index = ops.cast(index, "int32")
    return seeds + ops.stack([ops.zeros_like(index), index], axis=-1)
