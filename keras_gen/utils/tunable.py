"""Numbers a user tunes that reach a compiled program as tensors."""

import contextlib
import threading

import numpy as np
from keras import ops


class Tunable:
    """A mixin for objects whose tunable numbers are program inputs.

    A subclass lists its numbers in `get_parameters()`. The compiled
    program receives them as tensors (`get_parameter_tensors()`) and reads
    them through the object inside `bind(...)`, so new values never change
    the program. Everything else in `get_config()` is the program's
    structure (`get_structure()`): objects with equal structures share a
    compiled program, whatever their numbers.
    """

    # Config entries that reach the program as inputs under other names (or
    # outside `get_parameters()`): they are not program structure.
    tunable_config = ()

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

    @contextlib.contextmanager
    def bind(self, parameters):
        """Within the context, `self.<name>` reads the given tensors.

        One thread at a time: a compiled program shared by several threads
        binds its objects while it traces (or, on torch, while it runs).
        """
        # `setdefault` is atomic: two threads get the same lock.
        lock = self.__dict__.setdefault("_bind_lock", threading.RLock())
        with lock:
            saved = {name: getattr(self, name) for name in parameters}
            try:
                for name, value in parameters.items():
                    setattr(self, name, value)
                yield self
            finally:
                for name, value in saved.items():
                    setattr(self, name, value)

    def __getstate__(self):
        # Locks do not copy or pickle; a copy gets its own.
        return {k: v for k, v in self.__dict__.items() if k != "_bind_lock"}
