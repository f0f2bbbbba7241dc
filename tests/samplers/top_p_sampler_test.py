import numpy as np
import pytest
from keras import ops

from keras_gen.kernels.filters import top_p_filter
from keras_gen.samplers import TopPSampler

# Row 0 probabilities: 0.5, 0.3, 0.15, 0.05; row 1: 0.05, 0.05, 0.1, 0.8.
PROBABILITIES = np.array([[0.5, 0.3, 0.15, 0.05], [0.05, 0.05, 0.1, 0.8]])
LOGITS = ops.convert_to_tensor(np.log(PROBABILITIES), "float32")


def kept(logits):
    return np.isfinite(ops.convert_to_numpy(logits)).tolist()


@pytest.mark.parametrize(
    "p, expected",
    [
        (0.5, [[True, False, False, False], [False, False, False, True]]),
        (0.7, [[True, True, False, False], [False, False, False, True]]),
        (0.85, [[True, True, True, False], [False, False, True, True]]),
        (1.0, [[True, True, True, True], [True, True, True, True]]),
        (0.01, [[True, False, False, False], [False, False, False, True]]),
    ],
)
def test_keeps_the_smallest_set_reaching_p(p, expected):
    assert kept(top_p_filter(LOGITS, p)) == expected


def test_k_cuts_first():
    sampler = TopPSampler(p=1.0, k=2)
    bound = sampler.with_parameters(sampler.get_parameter_tensors())
    tokens = bound.get_next_token(
        ops.repeat(LOGITS, 200, axis=0), ops.convert_to_tensor([0, 4])
    )
    tokens = ops.convert_to_numpy(tokens).reshape(2, 200)
    assert set(tokens[0]) <= {0, 1} and set(tokens[1]) <= {2, 3}


@pytest.mark.parametrize(
    "p, error", [(0, ValueError), (1.5, ValueError), ("x", TypeError)]
)
def test_bad_p(p, error):
    with pytest.raises(error, match="`p`"):
        TopPSampler(p=p)


def test_bad_k():
    with pytest.raises(ValueError, match="`k`"):
        TopPSampler(k=0)
