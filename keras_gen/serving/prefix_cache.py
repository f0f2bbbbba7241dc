"""A bounded LRU of prompt prefixes' key/value blocks, in host memory."""

import collections
import hashlib

import numpy as np

# Tokens per block: a prefix is reused in whole blocks.
BLOCK_TOKENS = 16


class PrefixCache:
    """Key/value blocks of token prefixes the engine computed, by prefix.

    A block holds the keys and values of `block_tokens` positions of every
    layer. It is keyed by a digest of the token ids of the whole prefix up
    to its end (each block's key chains its parent's), so that a block is
    found only after the same tokens at the same positions. The blocks live
    in host memory and the least recently used go first when `capacity`
    bytes would be passed. A prefix's first blocks are kept longer than its
    last ones: a lookup that misses a block cannot use the ones after it.

    Args:
        capacity: int, bytes the blocks may take (0: keep none).
        block_tokens: int, positions per block.

    Examples:
    >>> cache = PrefixCache(capacity=1 << 20, block_tokens=2)
    >>> block = [(np.zeros((1, 2, 4)), np.ones((1, 2, 4)))]
    >>> cache.put([1, 2, 3], 0, block)
    >>> len(cache.lookup([1, 2, 3, 4]))
    1
    >>> cache.lookup([5, 2, 3])
    []
    """

    def __init__(self, capacity, block_tokens=BLOCK_TOKENS):
        self.capacity = capacity
        self.block_tokens = block_tokens
        self.bytes = 0
        self._blocks = collections.OrderedDict()  # digest -> (layers, bytes)

    def keys(self, token_ids):
        """The digests of `token_ids`' whole blocks, first to last."""
        size, digest, keys = self.block_tokens, b"", []
        ids = np.asarray(token_ids, "<i4")
        for end in range(size, len(ids) + 1, size):
            digest = hashlib.blake2b(
                digest + ids[end - size : end].tobytes(), digest_size=16
            ).digest()
            keys.append(digest)
        return keys

    def lookup(self, token_ids, keys=None):
        """The cached blocks that begin `token_ids`, first to last: each a
        tuple per layer of `(keys, values)` arrays of `block_tokens`
        positions. Marks them used."""
        found = []
        for key in self.keys(token_ids) if keys is None else keys:
            entry = self._blocks.get(key)
            if entry is None:
                break
            found.append((key, entry[0]))
        self.touch([key for key, _ in found])
        return [layers for _, layers in found]

    def touch(self, keys):
        """Mark the blocks of `keys` (a prefix's, first to last) used: the
        first end most recently used, so that they leave last."""
        for key in reversed(keys):
            if key in self._blocks:
                self._blocks.move_to_end(key)

    def __contains__(self, key):
        return key in self._blocks

    def put(self, token_ids, index, layers, keys=None):
        """Keep block `index` of `token_ids`: `layers` as `lookup` gives
        it. Evicts the least recently used blocks to stay within
        `capacity` (`touch` the prefix's keys after putting its blocks)."""
        key = (self.keys(token_ids) if keys is None else keys)[index]
        size = sum(k.nbytes + v.nbytes for k, v in layers)
        if key in self._blocks or size > self.capacity:
            return
        while self.bytes + size > self.capacity:
            _, (_, freed) = self._blocks.popitem(last=False)
            self.bytes -= freed
        self._blocks[key] = (layers, size)
        self.bytes += size

    def clear(self):
        self._blocks.clear()
        self.bytes = 0

    def __len__(self):
        return len(self._blocks)
