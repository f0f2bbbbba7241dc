import numpy as np
import pytest
from keras import ops

from keras_gen.kernels.filters import top_k_filter
from keras_gen.samplers import GreedySampler
from keras_gen.samplers import TopKSampler
from tests.samplers.fake_model import fake_next
from tests.samplers.fake_model import spell

LOGITS = np.array([[1.0, 5.0, 3.0, 4.0, 2.0], [9.0, 0.0, 8.0, 7.0, 6.0]], "float32")


def kept(logits):
    return np.isfinite(ops.convert_to_numpy(logits)).tolist()


def test_filter_keeps_the_k_largest_per_row():
    assert kept(top_k_filter(ops.convert_to_tensor(LOGITS), 2)) == [
        [False, True, False, True, False],
        [True, False, True, False, False],
    ]


def test_k_may_be_a_tensor_and_is_clipped_to_the_vocabulary():
    k = ops.convert_to_tensor(99.0)
    assert kept(top_k_filter(ops.convert_to_tensor(LOGITS), k)) == [[True] * 5] * 2


def test_k_equal_one_is_greedy():
    prompt = np.zeros((1, 7), "int32")
    greedy = GreedySampler()(fake_next("sampler"), prompt, index=0)
    top_1 = TopKSampler(k=1)(fake_next("sampler"), prompt, index=0)
    assert spell(top_1[0]) == spell(greedy[0]) == "sampler"


def test_samples_only_among_the_top_k():
    logits = ops.convert_to_tensor(np.tile(LOGITS[:1], (300, 1)))
    sampler = TopKSampler(k=2)
    bound = sampler.with_parameters(sampler.get_parameter_tensors())
    tokens = bound.get_next_token(logits, ops.convert_to_tensor([0, 1]))
    assert set(ops.convert_to_numpy(tokens).tolist()) == {1, 3}


@pytest.mark.parametrize(
    "k, error", [(0, ValueError), (-2, ValueError), (2.5, TypeError)]
)
def test_bad_k(k, error):
    with pytest.raises(error, match="`k`"):
        TopKSampler(k=k)
