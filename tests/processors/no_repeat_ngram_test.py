import pytest
from transformers.generation import logits_process as hf

from keras_gen.processors import NoRepeatNGram
from tests.processors import helpers


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_matches_transformers(n):
    helpers.assert_parity(
        NoRepeatNGram(n), hf.NoRepeatNGramLogitsProcessor(n), seeds=range(8)
    )


def test_contracts():
    helpers.assert_contracts(NoRepeatNGram(2))


@pytest.mark.parametrize("n", [0, 17, 2.5])
def test_invalid_n(n):
    with pytest.raises((ValueError, TypeError)):
        NoRepeatNGram(n)
