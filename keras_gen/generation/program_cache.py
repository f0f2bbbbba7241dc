"""Compiled programs found by structure, a bounded number of them."""

import collections
import threading


class ProgramCache:
    """Compiled programs by key, the least recently used dropped first.

    A key is the structure a program was built for (the sampler's and the
    processors' structures, a shape bucket, what it outputs), never an
    object's identity: a new object of the same structure finds the same
    program. `CausalLM` and the serving `Engine` each keep one.

    Args:
        max_size: int, the most programs kept.
    """

    def __init__(self, max_size):
        self.max_size = max_size
        self._programs = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, build):
        """The program of `key`, or `build()`'s, kept under `key`.

        The build runs outside the lock (it traces and compiles): two
        threads may build the same key, and the first kept wins.
        """
        with self._lock:
            if key in self._programs:
                self._programs.move_to_end(key)
                return self._programs[key]
        program = build()
        with self._lock:
            program = self._programs.setdefault(key, program)
            self._programs.move_to_end(key)
            while len(self._programs) > self.max_size:
                self._programs.popitem(last=False)
        return program

    def clear(self):
        with self._lock:
            self._programs.clear()

    def __len__(self):
        return len(self._programs)

    def keys(self):
        with self._lock:
            return list(self._programs)

    def items(self):
        with self._lock:
            return list(self._programs.items())

    def replace(self, key, program):
        """Put `program` under a key the cache holds (to wrap one)."""
        with self._lock:
            if key not in self._programs:
                raise KeyError(key)
            self._programs[key] = program
