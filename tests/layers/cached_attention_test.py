import numpy as np
from keras import ops

from keras_gen.layers import CachedAttention
from keras_gen.layers.cached_attention import CacheView


def reference(query, key, value, window=None):
    """Causal attention over the whole sequence, in numpy."""
    groups = query.shape[1] // key.shape[1]
    key, value = np.repeat(key, groups, axis=1), np.repeat(value, groups, axis=1)
    scores = query @ key.transpose(0, 1, 3, 2) / np.sqrt(query.shape[-1])
    length = query.shape[2]
    allowed = np.tril(np.ones((length, length), bool))
    if window:
        allowed &= ~np.tril(np.ones((length, length), bool), -window)
    scores = np.where(allowed, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ value


def random_qkv(query_heads=4, kv_heads=2, length=6):
    rng = np.random.default_rng(0)
    query = rng.standard_normal((2, query_heads, length, 8)).astype("float32")
    key = rng.standard_normal((2, kv_heads, length, 8)).astype("float32")
    value = rng.standard_normal((2, kv_heads, length, 8)).astype("float32")
    return query, key, value


def decode(layer, query, key, value, cache_length=16):
    """Seed the cache with 2 tokens, then add one token at a time."""
    cache = (np.zeros((2, key.shape[1], cache_length, 8), "float32"),) * 2
    out, cache = layer(
        query[:, :, :2], key[:, :, :2], value[:, :, :2], cache=cache, seed_cache=True
    )
    outputs = [ops.convert_to_numpy(out)]
    for i in range(2, query.shape[2]):
        step = slice(i, i + 1)
        out, cache = layer(
            query[:, :, step],
            key[:, :, step],
            value[:, :, step],
            cache=cache,
            index=ops.convert_to_tensor(i, "int32"),
        )
        outputs.append(ops.convert_to_numpy(out))
    return np.concatenate(outputs, axis=2)


def test_grouped_query_cached_decoding_equals_full_attention():
    query, key, value = random_qkv()
    np.testing.assert_allclose(
        decode(CachedAttention(), query, key, value),
        reference(query, key, value),
        atol=1e-5,
    )


def test_sliding_window():
    query, key, value = random_qkv(query_heads=2, kv_heads=2)
    np.testing.assert_allclose(
        decode(CachedAttention(sliding_window=3), query, key, value),
        reference(query, key, value, window=3),
        atol=1e-5,
    )


def test_without_cache_attends_causally():
    query, key, value = random_qkv()
    out, cache = CachedAttention()(query, key, value)
    assert cache is None
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), reference(query, key, value), atol=1e-5
    )


def test_a_cache_row_attends_as_that_row_alone_and_writes_only_it():
    rng = np.random.default_rng(1)
    caches = [rng.standard_normal((3, 2, 16, 8)).astype("float32") for _ in range(2)]
    query = rng.standard_normal((1, 4, 3, 8)).astype("float32")
    key, value = (rng.standard_normal((1, 2, 3, 8)).astype("float32") for _ in "kv")
    layer, index = CachedAttention(), ops.convert_to_tensor(5, "int32")
    # The row's first 8 positions, as a cache of their own.
    alone, _ = layer(
        query, key, value, cache=tuple(c[1:2, :, :8] for c in caches), index=index
    )
    row = CacheView(*caches, ops.convert_to_tensor(1, "int32"), ops.arange(8))
    outputs, written = layer(query, key, value, cache=row, index=index)
    np.testing.assert_allclose(
        ops.convert_to_numpy(outputs), ops.convert_to_numpy(alone), atol=1e-6
    )
    for before, after, new in zip(caches, written[:2], (key, value)):
        expected = before.copy()
        expected[1, :, 5:8] = new[0]
        np.testing.assert_array_equal(ops.convert_to_numpy(after), expected)
