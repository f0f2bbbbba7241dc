"""Scaled dot-product attention over a fixed-shape key/value cache."""

import collections
import math

import keras
from keras import ops

from keras_gen import backend
from keras_gen import layouts
from keras_gen.layers.lean_call import LeanCall


class CacheView(
    collections.namedtuple("CacheView", ("keys", "values", "row", "positions"))
):
    """A layer's cache given as rows of many-row `keys` and `values` (the
    serving engine's slots): as many rows as the call's batch from row
    `row` (a scalar tensor; `0` with a `(batch,)` index), of which the
    call attends to the first positions, as many as the `(length,)`
    tensor `positions` holds (its shape is what counts: Keras takes no
    Python numbers beside tensors). The new keys and values go straight
    into the many-row cache, in place, and only the rows' first positions
    are read back: a prompt chunk or a decode step costs the positions it
    attends to, not a copy of its rows."""

    @classmethod
    def first_positions(cls, state, length):
        """Each layer's `(keys, values)` of `state` as a view from row 0
        over its first `length` positions (a length that may change
        between the calls of a compiled step: `backend.varying_length`)."""
        zero = ops.zeros((), "int32")
        positions = backend.varying_length(ops.arange(length), axis=0)
        return tuple(cls(*layer, zero, positions) for layer in state)

    @staticmethod
    def whole(views):
        """The `(keys, values)` of each layer's view: the whole caches."""
        return tuple((view.keys, view.values) for view in views)


@keras.saving.register_keras_serializable(package="keras_gen")
class CachedAttention(LeanCall, keras.layers.Layer):
    """Causal attention that reads and writes a preallocated key/value cache.

    The layer has no weights: the projections belong to the model. It writes
    the new keys and values into the cache at `index` (a scalar tensor) and
    attends from each new query to every cached position at or before its
    own. The cache never grows, so a compiled decode step keeps one shape
    for the whole generation. Grouped-query attention is handled by sharing
    each key/value head between `num_query_heads // num_key_value_heads`
    query heads.

    Args:
        sliding_window: `None` or int, how many recent positions each token
            attends to (itself included).
        scale: `None` (`1 / sqrt(head_dim)`) or float, the factor of the
            query-key scores.
        logit_softcap: `None` or float `c`: scores become
            `c * tanh(scores / c)` before the softmax (Gemma 2).

    Call arguments:
        query: `(batch, num_query_heads, length, head_dim)`.
        key: `(batch, num_key_value_heads, length, head_dim)`.
        value: same shape as `key`.
        cache: `None`, or a `(key_cache, value_cache)` pair, each
            `(batch, num_key_value_heads, cache_length, head_dim)`, or a
            `CacheView` of such caches. It is
            handed over: on torch it is updated in place.
        index: scalar int tensor, the position of the first new token, or
            a `(batch,)` int tensor: one such position per row.
        seed_cache: bool. When `True` the new keys and values are written
            into the cache but the queries attend to the new tokens only:
            cache seeding costs `length**2`, not `length * cache_length`.
        padding_mask: `None`, or `(batch, length)` with 0 where `key` is
            padding (without a cache: training on padded rows). Padded keys
            are never attended to.

    Returns:
        `(outputs, cache)`: outputs `(batch, num_query_heads, length,
        head_dim)` and the updated cache (or `None`).

    Examples:
    >>> attention = CachedAttention()
    >>> q = k = v = keras.ops.ones((1, 2, 3, 4))
    >>> outputs, _ = attention(q, k, v)
    >>> keras.ops.shape(outputs)
    (1, 2, 3, 4)
    """

    def __init__(self, sliding_window=None, scale=None, logit_softcap=None, **kwargs):
        super().__init__(**kwargs)
        self.sliding_window = sliding_window
        self.scale = scale
        self.logit_softcap = logit_softcap
        # No weights: built from the start, so a model quantizes before its
        # first call.
        self.built = True

    def call(
        self,
        query,
        key,
        value,
        cache=None,
        index=0,
        seed_cache=False,
        padding_mask=None,
    ):
        query_length = ops.shape(query)[2]
        # Under a `keras.distribution` each device attends with its own
        # heads (and rows): no-ops otherwise.
        query, key, value = map(layouts.shard_heads, (query, key, value))
        # A `(batch,)` index: each row writes and attends from its own
        # position (speculative decoding). A scalar index is the fast path.
        per_row = len(getattr(index, "shape", ())) == 1
        update = backend.update_rows if per_row else backend.update_slice
        keys, values, key_start = key, value, index
        if isinstance(cache, CacheView):
            row = ops.cast(cache.row, "int32")
            zero = ops.zeros((), "int32")

            def write(x, new):
                if per_row:  # the first rows, each at its own position
                    return update(x, new, index, axis=2, donate=True)
                starts = (row, zero, ops.cast(index, "int32"), zero)
                return backend.update_block(x, new, starts, donate=True)

            key_cache, value_cache = (
                layouts.shard_heads(write(x, new))
                for x, new in ((cache.keys, key), (cache.values, value))
            )
            cache = cache._replace(keys=key_cache, values=value_cache)
            batch = ops.shape(query)[0]
            keys, values = (
                backend.slice(
                    backend.slice(x, row, batch, axis=0),
                    0,
                    ops.shape(cache.positions)[0],
                    axis=2,
                )
                for x in (key_cache, value_cache)
            )
            key_start = 0
        elif cache is not None:
            key_cache, value_cache = cache
            # The caller hands the cache over: it is written in place.
            key_cache = update(key_cache, key, index, axis=2, donate=True)
            value_cache = update(value_cache, value, index, axis=2, donate=True)
            cache = (layouts.shard_heads(key_cache), layouts.shard_heads(value_cache))
            if not seed_cache:
                keys, values, key_start = key_cache, value_cache, 0
        key_length = ops.shape(keys)[2]
        if per_row:
            index, key_start = index[:, None], ops.reshape(key_start, (-1, 1))
        # (length,) or (batch, length) positions.
        query_positions = index + ops.arange(query_length, dtype="int32")
        key_positions = key_start + ops.arange(key_length, dtype="int32")
        recent = query_positions[..., :, None] - key_positions[..., None, :]
        allowed = recent >= 0
        if self.sliding_window is not None:
            allowed = ops.logical_and(allowed, recent < self.sliding_window)
        if padding_mask is not None:
            # (batch, 1, key_length): broadcast over the queries.
            real = ops.cast(padding_mask, "bool")[:, None, :]
            allowed = ops.logical_and(allowed, real)
        outputs = self._attend(query, keys, values, allowed)
        return outputs, cache

    def _attend(self, query, keys, values, allowed):
        num_query_heads = ops.shape(query)[1]
        num_key_value_heads = ops.shape(keys)[1]
        groups = num_query_heads // num_key_value_heads
        batch, _, query_length, head_dim = ops.shape(query)
        # (batch, kv_heads, groups * query_length, head_dim): the query heads
        # that share a key/value head are folded into the length axis.
        query = ops.reshape(
            query, (batch, num_key_value_heads, groups * query_length, head_dim)
        )
        scores = ops.matmul(query, ops.swapaxes(keys, -1, -2))
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(head_dim)
        scores = ops.cast(scores, "float32") * scale
        if self.logit_softcap is not None:
            scores = ops.tanh(scores / self.logit_softcap) * self.logit_softcap
        # (query_length, key_length), or (batch, query_length, key_length)
        # with per-row positions: broadcast over (batch, kv_heads).
        if len(ops.shape(allowed)) == 2:
            allowed = ops.tile(allowed, (groups, 1))[None, None]
        else:
            allowed = ops.tile(allowed, (1, groups, 1))[:, None]
        scores = ops.where(allowed, scores, -1e30)
        weights = ops.cast(ops.softmax(scores, axis=-1), values.dtype)
        outputs = ops.matmul(weights, values)
        return ops.reshape(outputs, (batch, num_query_heads, query_length, head_dim))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sliding_window": self.sliding_window,
                "scale": self.scale,
                "logit_softcap": self.logit_softcap,
            }
        )
        return config
