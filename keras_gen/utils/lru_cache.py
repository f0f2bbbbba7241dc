"""A bounded, thread-safe map that drops the least recently used entry."""

import collections
import threading


class LRUCache:
    """Values by key, at most `max_size` of them, the least recently used
    dropped first.

    Keys say what a value was made from (a pattern, a tokenizer's
    fingerprint, a program's structure), never an object's identity.

    Args:
        max_size: int, the most entries kept.
    """

    def __init__(self, max_size):
        self.max_size = max_size
        self._entries = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, make):
        """The value of `key`, or `make()`'s, kept under `key`.

        `make` runs outside the lock (it may take long): two threads may
        make the same key, and the first kept wins.
        """
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = make()
        with self._lock:
            value = self._entries.setdefault(key, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)
        return value

    def clear(self):
        with self._lock:
            self._entries.clear()

    def __len__(self):
        return len(self._entries)

    def keys(self):
        with self._lock:
            return list(self._entries)

    def items(self):
        with self._lock:
            return list(self._entries.items())

    def replace(self, key, value):
        """Put `value` under a key the cache holds (to wrap one)."""
        with self._lock:
            if key not in self._entries:
                raise KeyError(key)
            self._entries[key] = value
