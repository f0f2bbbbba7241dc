"""Numbers a user tunes that reach a compiled program as tensors."""

import copy

import numpy as np
from keras import ops


def rows_of(value, rows):
    """`value`, one copy per row: a number becomes a `(rows, 1)` column,
    an array of shape `s` a `(rows, *s)` tensor."""
    value = ops.convert_to_tensor(value)
    shape = tuple(ops.shape(value)) or (1,)
    return ops.broadcast_to(ops.reshape(value, (1, *shape)), (rows, *shape))


def stack_rows(objects):
    """The numbers of several objects of one structure, one row each: a
    dict of `(rows, 1)` columns (numbers) and `(rows, *s)` arrays, what
    `with_parameters` takes for rows with different settings."""
    values = [o.get_parameters() for o in objects]
    stacked = {}
    for name in values[0]:
        rows = [np.asarray(v[name], parameter_dtype(v[name])) for v in values]
        stacked[name] = np.stack([r.reshape(r.shape or (1,)) for r in rows])
    return stacked


class Tunable:
    """A mixin for objects whose tunable numbers are program inputs.

    A subclass lists its numbers in `get_parameters()`. The compiled
    program receives them as tensors (`get_parameter_tensors()`) and reads
    them through a copy of the object made with `with_parameters(...)`
    while it is traced, so new values never change the program, and the
    object a caller holds is never changed. Everything else in
    `get_config()` is the program's structure (`get_structure()`): objects
    with equal structures share a compiled program, whatever their numbers.

    Per-row numbers: where `per_row` is `True` (the default), the program
    hands each number over as one value per row of the logits: a number as
    a `(rows, 1)` column, which broadcasts against `(rows, vocab)` logits,
    an array of shape `(n,)` as `(rows, n)`. `generate` passes equal rows;
    the serving `Engine` passes each request's own. Code that broadcasts
    (`logits - counts * self.value`) works unchanged in both. A class whose
    numbers are one value for the whole program (lookup tables, beam
    search's settings) sets `per_row = False`.
    """

    # Config entries that reach the program as inputs under other names (or
    # outside `get_parameters()`): they are not program structure.
    tunable_config = ()
    # Whether the program hands each number over as one value per row.
    per_row = True
    # Whether arrays among the numbers may be padded to a larger shape
    # (ints with -1, floats with 0) without changing what they do: padded
    # id lists (`pad_ids`, `pad_sequences`).
    resizable = False

    def get_parameters(self):
        """The tunable numbers, checked: a dict of numbers or numpy arrays."""
        return {}

    def get_parameter_tensors(self):
        """`get_parameters()` as tensors (ints int32, floats float32)."""
        return {
            name: ops.convert_to_tensor(value, parameter_dtype(value))
            for name, value in self.get_parameters().items()
        }

    def with_parameters(self, parameters, rows=None):
        """A copy of this object that reads `parameters` (a dict of
        tensors, as `get_parameter_tensors()`) as its attributes.

        With `rows` and `per_row`, each value is first repeated per row
        (see `rows_of`); without `rows` the values are taken as they are
        (already one per row, or shared).
        """
        bound = copy.copy(self)
        for name, value in parameters.items():
            if rows is not None and self.per_row:
                value = rows_of(value, rows)
            setattr(bound, name, value)
        return bound

    def get_structure(self):
        """What selects a compiled program: the class, the config without
        the tunable numbers, and the names and shapes of those numbers."""
        parameters = self.get_parameters()
        tunable = set(parameters) | set(self.tunable_config)
        config = {k: v for k, v in self.get_config().items() if k not in tunable}
        shapes = {k: np.shape(v) for k, v in parameters.items()}
        return (type(self), repr(sorted(config.items())), repr(sorted(shapes.items())))

    def get_config(self):
        return {}


def parameter_dtype(value):
    """The dtype a tunable number reaches the program in: int32 or float32."""
    value = np.asarray(value)
    if np.issubdtype(value.dtype, np.integer):
        return "int32"
    return "float32"
