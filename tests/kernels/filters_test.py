import numpy as np
import pytest
from keras import ops

from keras_gen.kernels import filters

RNG = np.random.default_rng(0)
LOGITS = ops.convert_to_tensor((3 * RNG.standard_normal((6, 40))).astype("float32"))


def kept(logits):
    return np.isfinite(ops.convert_to_numpy(logits))


def one_by_one(logits, top_k, top_p, min_p):
    """The filters applied one after the other, in vLLM's order."""
    logits = filters.min_p_filter(logits, min_p)
    logits = filters.top_k_filter(logits, top_k) if top_k else logits
    return filters.top_p_filter(logits, top_p)


@pytest.mark.parametrize(
    "top_k, top_p, min_p",
    [(5, 0.7, 0.0), (0, 0.5, 0.1), (12, 1.0, 0.3), (3, 0.2, 0.05), (40, 0.95, 0.0)],
)
def test_combined_filter_equals_the_filters_one_after_the_other(top_k, top_p, min_p):
    combined = filters.filter_logits(LOGITS, top_k=top_k, top_p=top_p, min_p=min_p)
    np.testing.assert_array_equal(
        kept(combined), kept(one_by_one(LOGITS, top_k, top_p, min_p))
    )


def test_values_may_be_tensors_and_neutral_values_keep_every_token():
    tensors = {
        "top_k": ops.convert_to_tensor(0, "int32"),
        "top_p": ops.convert_to_tensor(1.0),
        "min_p": ops.convert_to_tensor(0.0),
        "typical_p": ops.convert_to_tensor(1.0),
    }
    assert kept(filters.filter_logits(LOGITS, **tensors)).all()
    assert kept(filters.filter_logits(LOGITS)).all()


def test_top_p_measures_mass_over_what_top_k_kept():
    probabilities = np.array([[0.4, 0.3, 0.2, 0.1]], "float32")
    logits = ops.convert_to_tensor(np.log(probabilities))
    # Over the top 2 (0.4, 0.3 -> 0.57, 0.43), p=0.5 keeps one token; over
    # all four it would keep two.
    assert kept(filters.filter_logits(logits, top_k=2, top_p=0.5)).tolist() == [
        [True, False, False, False]
    ]
    assert kept(filters.top_p_filter(logits, 0.5)).sum() == 2


def test_rows_that_are_all_inf_stay_all_inf_without_nan():
    logits = ops.convert_to_tensor(np.full((2, 8), -np.inf, "float32"))
    out = ops.convert_to_numpy(
        filters.filter_logits(logits, top_k=3, top_p=0.5, min_p=0.1, typical_p=0.5)
    )
    assert np.isneginf(out).all()


def test_kth_largest_without_a_sort_is_the_sorted_rows_value():
    # Ties, -inf, signed zeros, tiny and huge spreads, k out of range. Three
    # shapes only: on JAX each new shape compiles the bisection loop.
    rng = np.random.default_rng(1)
    for trial in range(24):
        vocabulary_size, rows = [1, 7, 257][(trial // 3) % 3], 3
        scale = [1e-3, 1.0, 1e4][trial % 3]
        x = rng.normal(0, scale, (rows, vocabulary_size)).astype("float32")
        if trial % 2:
            x = np.round(x, 1)
        if trial % 4 == 0:
            x[:, : vocabulary_size // 3] = -np.inf
        if trial % 5 == 0:
            x[0, 0], x[0, -1] = -0.0, 0.0
        if trial % 7 == 0:
            x[:] = -np.inf
        k = rng.integers(0, vocabulary_size + 3, (rows, 1)).astype("int32")
        position = vocabulary_size - np.clip(k, 1, vocabulary_size)
        expected = np.take_along_axis(np.sort(x, axis=-1), position, axis=-1)
        got = filters.kth_largest(ops.convert_to_tensor(x), ops.convert_to_tensor(k))
        np.testing.assert_array_equal(ops.convert_to_numpy(got), expected)


def test_top_n_sigma_keeps_tokens_near_the_top_whatever_the_temperature():
    logits = ops.convert_to_numpy(LOGITS)
    for n in (0.5, 1.0, 2.0):
        finite = logits
        sigma = finite.std(axis=-1, keepdims=True)
        expected = logits >= logits.max(-1, keepdims=True) - n * sigma
        np.testing.assert_array_equal(
            kept(filters.top_n_sigma_filter(LOGITS, n)), expected
        )
        # Scaled logits (another temperature) keep the same tokens.
        scaled = filters.top_n_sigma_filter(LOGITS / 0.3, n)
        np.testing.assert_array_equal(kept(scaled), expected)
    assert kept(filters.top_n_sigma_filter(LOGITS, 0.0)).all()
    # Tokens another filter cut do not count; a row of one token keeps it.
    cut = filters.top_k_filter(LOGITS, 1)
    assert (kept(filters.top_n_sigma_filter(cut, 1.0)) == kept(cut)).all()
    # Per row, and in the combined filter.
    n = ops.convert_to_tensor([[0.0], [1.0], [2.0], [0.5], [3.0], [1.5]])
    rows = kept(filters.filter_logits(LOGITS, top_n_sigma=n))
    for r, value in enumerate([0.0, 1.0, 2.0, 0.5, 3.0, 1.5]):
        alone = filters.top_n_sigma_filter(LOGITS[r : r + 1], value)
        np.testing.assert_array_equal(rows[r : r + 1], kept(alone))
