import numpy as np
import pytest
from transformers.generation import logits_process as hf

from keras_gen.processors import ForcedEOS
from tests.processors import helpers


@pytest.mark.parametrize("max_length", [8, 9, 10])
def test_matches_transformers(max_length):
    helpers.assert_parity(
        ForcedEOS(3, max_length=max_length),
        hf.ForcedEOSTokenLogitsProcessor(max_length, 3),
    )


def test_forces_at_each_rows_end():
    logits, prompt, index, mask = helpers.random_case(0)
    end = np.asarray([9, 12, 9, 10], "int32")
    outputs = helpers.run(ForcedEOS(3), logits, prompt, index, mask, end=end)
    forced = np.full(helpers.VOCAB, -np.inf, "float32")
    forced[3] = 0
    for row in range(4):
        expected = forced if row in (0, 2) else logits[row]
        np.testing.assert_array_equal(outputs[row], expected)


def test_contracts():
    helpers.assert_contracts(ForcedEOS(1, max_length=9))


def test_invalid():
    with pytest.raises(ValueError):
        ForcedEOS(-1)
