import pytest
from transformers.generation import logits_process as hf

from keras_gen.processors import SuppressTokens
from tests.processors import helpers


def test_matches_transformers():
    helpers.assert_parity(
        SuppressTokens([0, 5, 17]), hf.SuppressTokensLogitsProcessor([0, 5, 17])
    )


def test_contracts():
    helpers.assert_contracts(SuppressTokens([1]))


@pytest.mark.parametrize("ids", [[], [-2], ["a"]])
def test_invalid_ids(ids):
    with pytest.raises(ValueError):
        SuppressTokens(ids)
