"""Compiled programs found by structure, a bounded number of them."""

from keras_gen.utils.lru_cache import LRUCache


class ProgramCache(LRUCache):
    """Compiled programs by key, the least recently used dropped first.

    A key is the structure a program was built for (the sampler's and the
    processors' structures, a shape bucket, what it outputs), never an
    object's identity: a new object of the same structure finds the same
    program. `CausalLM` and the serving `Engine` each keep one. `get(key,
    build)` runs `build()` (a trace and compile) outside the lock.

    Args:
        max_size: int, the most programs kept.
    """
