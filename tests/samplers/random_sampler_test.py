import numpy as np
import pytest
from keras import ops

from keras_gen.samplers import RandomSampler
from keras_gen.samplers.random_sampler import sample_from_logits
from tests.samplers.fake_model import fake_next
from tests.samplers.fake_model import spell


def test_dominant_letters_are_always_drawn():
    prompt = np.zeros((1, 6), "int32")
    tokens = RandomSampler()(fake_next("keras"), prompt, index=0)
    assert spell(tokens[0]) == "keras*"


def test_draws_follow_the_distribution():
    probabilities = np.array([0.1, 0.2, 0.7], "float32")
    logits = ops.convert_to_tensor(np.log(np.tile(probabilities, (4000, 1))))
    tokens = ops.convert_to_numpy(
        sample_from_logits(logits, ops.convert_to_tensor([3, 0], "int32"))
    )
    frequencies = np.bincount(tokens, minlength=3) / len(tokens)
    np.testing.assert_allclose(frequencies, probabilities, atol=0.03)


def test_filtered_tokens_are_never_drawn():
    logits = ops.convert_to_tensor(
        np.tile([[0.0, float("-inf"), 0.0, float("-inf")]], (500, 1)), "float32"
    )
    tokens = ops.convert_to_numpy(
        sample_from_logits(logits, ops.convert_to_tensor([1, 2], "int32"))
    )
    assert set(tokens.tolist()) == {0, 2}


def test_same_seed_same_draw_other_seed_other_draw():
    logits = ops.zeros((64, 50))
    draw = lambda seed: ops.convert_to_numpy(  # noqa: E731
        sample_from_logits(logits, ops.convert_to_tensor(seed, "int32"))
    ).tolist()
    assert draw([5, 1]) == draw([5, 1])
    assert draw([5, 1]) != draw([5, 2])
    assert draw([5, 1]) != draw([6, 1])


@pytest.mark.parametrize("temperature", [0, -1.0])
def test_temperature_must_be_positive(temperature):
    with pytest.raises(ValueError, match="temperature"):
        RandomSampler(temperature=temperature)


def test_temperature_must_be_a_number():
    with pytest.raises(TypeError, match="temperature"):
        RandomSampler(temperature="hot")


def test_config_round_trip():
    sampler = RandomSampler(temperature=0.5, seed=3)
    clone = RandomSampler.from_config(sampler.get_config())
    assert clone.get_config() == {"temperature": 0.5, "seed": 3}
