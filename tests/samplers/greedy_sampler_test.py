import numpy as np
from keras import ops

from keras_gen.samplers import GreedySampler
from tests.samplers.fake_model import fake_next
from tests.samplers.fake_model import spell


def test_spells_the_most_likely_word():
    prompt = np.zeros((1, 12), "int32")
    tokens = GreedySampler()(fake_next("keras"), prompt, index=0)
    assert spell(tokens[0]) == "keras*******"


def test_keeps_the_prompt_and_starts_at_index():
    prompt = np.zeros((2, 8), "int32")
    prompt[:, :2] = [[15, 15], [3, 3]]  # "pp", "dd"
    tokens = GreedySampler()(fake_next("xxkeras", batch=2), prompt, index=2)
    assert [spell(row) for row in tokens] == ["ppkeras*", "ddkeras*"]


def test_stops_each_row_at_a_stop_token():
    prompt = np.zeros((1, 10), "int32")
    tokens = GreedySampler()(fake_next("abc"), prompt, index=0, stop_token_ids=[2])
    # The loop ends once every row has stopped; later slots stay as given.
    assert spell(tokens[0]) == "abc" + "a" * 7


def test_argmax_of_logits():
    logits = ops.convert_to_tensor([[0.1, 3.0, -1.0], [5.0, 4.0, 4.9]])
    tokens = GreedySampler().get_next_token(logits, None)
    assert ops.convert_to_numpy(tokens).tolist() == [1, 0]
