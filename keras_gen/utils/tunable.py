"""Numbers a user tunes that reach a compiled program as tensors."""

import contextlib

import numpy as np
from keras import ops


class Tunable:
    """A mixin for objects whose tunable numbers are program inputs.

    A subclass lists its numbers in `get_parameters()`. The compiled
    program receives them as tensors (`get_parameter_tensors()`) and reads
    them through the object inside `bind(...)`, so new values never change
    the program.
    """

    def get_parameters(self):
        """The tunable numbers, checked: a dict of numbers or numpy arrays."""
        return {}

    def get_parameter_tensors(self):
        """`get_parameters()` as tensors (ints int32, floats float32)."""
        tensors = {}
        for name, value in self.get_parameters().items():
            value = np.asarray(value)
            dtype = "int32" if np.issubdtype(value.dtype, np.integer) else "float32"
            tensors[name] = ops.convert_to_tensor(value, dtype)
        return tensors

    @contextlib.contextmanager
    def bind(self, parameters):
        """Within the context, `self.<name>` reads the given tensors."""
        saved = {name: getattr(self, name) for name in parameters}
        try:
            for name, value in parameters.items():
                setattr(self, name, value)
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)
