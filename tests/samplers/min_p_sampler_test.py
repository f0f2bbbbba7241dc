import numpy as np
import pytest
from keras import ops

from keras_gen.kernels.filters import min_p_filter
from keras_gen.samplers import MinPSampler

PROBABILITIES = np.array([[0.5, 0.3, 0.15, 0.05], [0.05, 0.05, 0.1, 0.8]])
LOGITS = ops.convert_to_tensor(np.log(PROBABILITIES), "float32")


def kept(logits):
    return np.isfinite(ops.convert_to_numpy(logits)).tolist()


@pytest.mark.parametrize(
    "p, expected",
    [
        # Floors: row 0 at 0.5 * p, row 1 at 0.8 * p.
        (0.2, [[True, True, True, False], [False, False, False, True]]),
        (0.12, [[True, True, True, False], [False, False, True, True]]),
        (0.5, [[True, True, False, False], [False, False, False, True]]),
        (0.05, [[True, True, True, True], [True, True, True, True]]),
        (1.0, [[True, False, False, False], [False, False, False, True]]),
    ],
)
def test_keeps_tokens_above_p_times_the_top_probability(p, expected):
    assert kept(min_p_filter(LOGITS, p)) == expected


@pytest.mark.parametrize(
    "p, error", [(0, ValueError), (2, ValueError), (None, TypeError)]
)
def test_bad_p(p, error):
    with pytest.raises(error, match="`p`"):
        MinPSampler(p=p)
