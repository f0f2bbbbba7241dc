import pytest
from transformers.generation import logits_process as hf

from keras_gen.processors import RepetitionPenalty
from tests.processors import helpers


@pytest.mark.parametrize("penalty", [0.5, 1.0, 1.7])
def test_matches_transformers(penalty):
    helpers.assert_parity(
        RepetitionPenalty(penalty), hf.RepetitionPenaltyLogitsProcessor(penalty)
    )


def test_contracts():
    helpers.assert_contracts(RepetitionPenalty(1.3))


@pytest.mark.parametrize("penalty", [0, -1.0, float("nan")])
def test_invalid_penalty(penalty):
    with pytest.raises(ValueError, match="penalty"):
        RepetitionPenalty(penalty)
