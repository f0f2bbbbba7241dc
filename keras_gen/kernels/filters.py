"""Logit filters: `-inf` for the tokens a sampling rule cuts.

Samplers apply them after the temperature; the filter processors apply them
wherever they sit in a chain. Every threshold is read from the data, so the
values (`k`, `p`, ...) may be tensors, one for every row or a `(rows, 1)`
column of each row's own: new values never change the program.
"""

import collections

from keras import ops

from keras_gen import backend
from keras_gen.utils import checks

NEG_INF = float("-inf")


def token_mask(token_ids, vocabulary_size):
    """`(1 or rows, vocab)` bool, `True` at the given ids: `(k,)` ids for
    every row, or `(rows, k)` per row; -1 pads. A scatter: its cost grows
    with `k` plus the vocabulary, not with their product."""
    token_ids = ops.cast(token_ids, "int32")
    if len(ops.shape(token_ids)) == 1:
        token_ids = token_ids[None, :]
    ones = ops.ones(ops.shape(token_ids), "float32")
    return backend.count_tokens(token_ids, ones, vocabulary_size) > 0


def top_k_filter(logits, k):
    """Set all but the `k` largest logits of each row to `-inf`.

    `k` may be a tensor: the k-th largest logit is found by bisection (no
    sort: a sort of a large vocabulary costs far more on CPU). Ties with
    the k-th logit are kept.
    """
    return ops.where(logits >= kth_largest(logits, k), logits, NEG_INF)


def kth_largest(logits, k):
    """`(batch, 1)`: the k-th largest value of each row of float32 `logits`,
    exactly, without sorting.

    Float32 bit patterns, with the magnitude bits of negative numbers
    flipped, are integers in the order of the values. Bisection over them
    (32 counting passes) finds the largest key that at least `k` keys reach:
    the k-th largest value's.
    """
    vocabulary_size = ops.shape(logits)[-1]
    k = ops.clip(ops.cast(k, "int32"), 1, vocabulary_size)
    bits = ops.view(ops.cast(logits, "float32"), "int32")
    keys = ops.where(bits < 0, ops.bitwise_xor(bits, 0x7FFFFFFF), bits)
    low = ops.amin(keys, axis=-1, keepdims=True)  # every key reaches it
    high = ops.amax(keys, axis=-1, keepdims=True)

    def halve(_, bounds):
        low, high = bounds
        # The upper middle, without overflowing int32.
        middle = (
            ops.right_shift(low, 1)
            + ops.right_shift(high, 1)
            + ops.bitwise_and(ops.bitwise_or(low, high), 1)
        )
        reached = ops.sum(ops.cast(keys >= middle, "int32"), axis=-1, keepdims=True)
        enough = reached >= k
        return ops.where(enough, middle, low), ops.where(enough, high, middle - 1)

    # A loop, not 32 unrolled passes: XLA's CPU compile time grows
    # exponentially with the unrolled chain (16 passes took minutes).
    low, high = ops.fori_loop(0, 32, halve, (low, high))
    return ops.amin(
        ops.where(keys >= low, logits, float("inf")), axis=-1, keepdims=True
    )


def top_p_filter(logits, p):
    """Keep the smallest set of most likely tokens whose mass reaches `p`.

    As transformers: the least likely tokens whose total mass is at most
    `1 - p` are removed, so `p=1` keeps every token (a "mass before < p"
    test would drop tiny ones to float rounding) and the most likely token
    always stays.
    """
    ascending = ops.sort(logits, axis=-1)
    return ops.where(logits >= _nucleus_floor(ascending, p), logits, NEG_INF)


def min_p_filter(logits, p):
    """Keep tokens at least `p` times as likely as the most likely one.

    `prob >= p * max_prob` is `logit >= max_logit + log(p)`: no softmax.
    `p=0` keeps every token.
    """
    # `ops.amax`: keras' torch `ops.max` breaks a fullgraph compile.
    threshold = ops.amax(logits, axis=-1, keepdims=True) + ops.log(p)
    return ops.where(logits >= threshold, logits, NEG_INF)


def typical_filter(logits, mass):
    """Keep the tokens whose surprise is closest to the row's entropy.

    Locally typical sampling (Meister et al., 2022), as transformers'
    `TypicalLogitsWarper`: tokens are ranked by `|-log p - entropy|` and the
    best ones are kept until their mass reaches `mass` (1 keeps all).
    """
    log_probs = ops.log_softmax(logits, axis=-1)
    probs = ops.exp(log_probs)
    # 0 * -inf is NaN: tokens with no mass add nothing to the entropy.
    entropy = -ops.sum(
        ops.where(probs > 0, probs * log_probs, 0.0), axis=-1, keepdims=True
    )
    surprise = ops.abs(-log_probs - entropy)  # (batch, vocab)
    order = ops.argsort(surprise, axis=-1)
    sorted_surprise = ops.take_along_axis(surprise, order, axis=-1)
    cumulative = ops.cumsum(ops.take_along_axis(probs, order, axis=-1), axis=-1)
    last = ops.sum(ops.cast(cumulative < mass, "int32"), axis=-1, keepdims=True)
    last = ops.minimum(last, ops.shape(logits)[-1] - 1)
    threshold = ops.take_along_axis(sorted_surprise, last, axis=-1)
    # An all `-inf` row has NaN surprise: it stays all `-inf`. `mass >= 1`
    # keeps everything, whatever the rounding of the running sum.
    keep = ops.logical_or(surprise <= threshold, mass >= 1)
    return ops.where(keep, logits, NEG_INF)


def top_n_sigma_filter(logits, n):
    """Keep tokens whose logit is within `n` standard deviations of the
    row's largest (top-nσ, Tang et al., 2024; llama.cpp's `top_n_sigma`).

    Mean and deviation are over the row's finite logits, so the tokens kept
    do not depend on the temperature. `n` <= 0 keeps every token.
    """
    finite = logits > NEG_INF
    count = ops.maximum(ops.sum(ops.cast(finite, "float32"), axis=-1, keepdims=True), 1)
    mean = ops.sum(ops.where(finite, logits, 0.0), axis=-1, keepdims=True) / count
    deviation = ops.where(finite, logits - mean, 0.0)
    sigma = ops.sqrt(ops.sum(deviation * deviation, axis=-1, keepdims=True) / count)
    threshold = ops.amax(logits, axis=-1, keepdims=True) - n * sigma
    return ops.where(ops.logical_or(logits >= threshold, n <= 0), logits, NEG_INF)


class Filter(collections.namedtuple("Filter", ("apply", "neutral", "check"))):
    """A sampling filter: `apply(logits, value)`, the `neutral` value that
    keeps every token, and `check(name, value)` for a value given."""


def _top_k_or_all(logits, k):
    """Top-k where `k` 0 keeps every token."""
    return top_k_filter(logits, ops.where(k > 0, k, ops.shape(logits)[-1]))


# The filters a sampled decode may carry, in the order they apply (vLLM's):
# each cuts from what the ones before it kept. A filter added here is an
# option of `RandomSampler`; a `GenerationConfig` field of the same name
# (`filter=True`) makes it an option of every entry point.
FILTERS = {
    "top_n_sigma": Filter(
        top_n_sigma_filter, 0.0, lambda name, v: checks.check_number(name, v, low=0)
    ),
    "min_p": Filter(min_p_filter, 0.0, checks.check_fraction),
    "top_k": Filter(
        _top_k_or_all, 0, lambda name, v: checks.check_int(name, v, 0, checks.INT32_MAX)
    ),
    "top_p": Filter(top_p_filter, 1.0, checks.check_probability),
    "typical_p": Filter(typical_filter, 1.0, checks.check_probability),
}


def filter_logits(logits, **values):
    """Apply the filters of `FILTERS` given in `values`, in its order.

    Each is skipped when absent (or `None`). Values may be tensors; their
    neutral values (`top_k=0`, `top_p=1`, `min_p=0`, `typical_p=1`) keep
    every token, so one program serves any mix, and a filter that no row
    needs is not run (no sort when every row's `top_k` and `top_p` are
    neutral). Top-k and top-p share one sort.
    """
    unknown = sorted(set(values) - set(FILTERS))
    if unknown:
        raise TypeError(f"Unknown filters {unknown}. Filters: {sorted(FILTERS)}")
    logits = ops.convert_to_tensor(logits, "float32")
    for name, (apply, neutral, _) in FILTERS.items():
        value = values.get(name)
        if value is None or (name == "top_k" and values.get("top_p") is not None):
            continue  # (top-k then runs with top-p)
        needed, operands = ops.any(value != neutral), (value,)
        if name == "top_p" and values.get("top_k") is not None:
            k = ops.cast(values["top_k"], "int32")
            needed, operands = ops.logical_or(needed, ops.any(k > 0)), (value, k)
            apply = _top_k_top_p
        logits = _where_needed(needed, apply, logits, *operands)
    return logits


def _where_needed(needed, function, logits, *values):
    """`function(logits, *values)`, run only when `needed` (else `logits`)."""
    return backend.cond(needed, function, lambda logits, *_: logits, logits, *values)


def _top_k_top_p(logits, p, k):
    """Top-k (`k` 0 keeps all), then top-p over what it kept: one sort."""
    ascending = ops.sort(logits, axis=-1)
    vocabulary_size = ops.shape(logits)[-1]
    threshold = _kth_largest(ascending, ops.where(k > 0, k, vocabulary_size))
    ascending = ops.where(ascending >= threshold, ascending, NEG_INF)
    threshold = ops.maximum(threshold, _nucleus_floor(ascending, p))
    return ops.where(logits >= threshold, logits, NEG_INF)


def _kth_largest(ascending, k):
    """`(batch, 1)`: the k-th largest value of each sorted row."""
    vocabulary_size = ops.shape(ascending)[-1]
    k = ops.clip(ops.cast(k, "int32"), 1, vocabulary_size)
    position = ops.reshape(vocabulary_size - k, (-1, 1))  # one k, or each row's
    position = ops.broadcast_to(position, (ops.shape(ascending)[0], 1))
    return ops.take_along_axis(ascending, position, axis=-1)


def _nucleus_floor(ascending, p):
    """`(batch, 1)`: the smallest logit top-p keeps in each sorted row."""
    mass = ops.cumsum(ops.softmax(ascending, axis=-1), axis=-1)
    removed = ops.sum(ops.cast(mass <= 1 - p, "int32"), axis=-1, keepdims=True)
    removed = ops.minimum(removed, ops.shape(ascending)[-1] - 1)
    return ops.take_along_axis(ascending, removed, axis=-1)
