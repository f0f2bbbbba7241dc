"""The prefix cache: blocks keyed by whole prefixes, least recently used
out first, first blocks last."""

import numpy as np

from keras_gen.serving.prefix_cache import PrefixCache


def block(value):
    """One layer's keys and values of 2 positions: 32 bytes."""
    return (
        (np.full((1, 2, 1), value, "float64"), np.full((1, 2, 1), value, "float64")),
    )


def test_a_block_is_found_only_after_the_same_prefix():
    cache = PrefixCache(capacity=1 << 10, block_tokens=2)
    ids = [1, 2, 3, 4, 5]
    keys = cache.keys(ids)
    assert len(keys) == 2 and keys == cache.keys(ids[:4])
    cache.put(ids, 0, block(0), keys=keys)
    cache.put(ids, 1, block(1), keys=keys)
    assert [b[0][0][0, 0, 0] for b in cache.lookup([1, 2, 3, 4, 9])] == [0, 1]
    # The same second block after another first one is another prefix.
    assert cache.lookup([9, 2, 3, 4]) == []
    assert len(cache.lookup([1, 2, 7, 4])) == 1
    assert len(cache.lookup([1])) == 0


def test_least_recently_used_blocks_leave_first_and_a_prefix_ends_first():
    cache = PrefixCache(capacity=4 * 32, block_tokens=2)
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    for ids in (a, b):
        for i in range(2):
            cache.put(ids, i, block(i))
        cache.touch(cache.keys(ids))
    assert cache.bytes == 128 and len(cache) == 4
    cache.lookup(a)  # b is now the least recently used
    cache.put([9, 9], 0, block(9))
    # b's last block left first: its first block still serves.
    assert len(cache.lookup(b)) == 1 and len(cache.lookup(a)) == 2
    assert cache.bytes == 128


def test_a_block_larger_than_the_capacity_is_not_kept():
    cache = PrefixCache(capacity=16, block_tokens=2)
    cache.put([1, 2], 0, block(0))
    assert len(cache) == 0 and cache.bytes == 0
    cache = PrefixCache(capacity=0, block_tokens=2)
    cache.put([1, 2], 0, block(0))
    assert cache.lookup([1, 2]) == []
