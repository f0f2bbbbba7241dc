import numpy as np
import pytest

from keras_gen.processors import FrequencyPenalty
from tests.processors import helpers


def test_subtracts_counts_of_generated_tokens():
    logits, prompt, index, mask = helpers.random_case(0)
    outputs = helpers.run(FrequencyPenalty(0.5), logits, prompt, index, mask)
    for row in range(len(prompt)):
        generated = prompt[row, :index][~mask[row, :index]]
        counts = np.bincount(generated, minlength=helpers.VOCAB)
        np.testing.assert_allclose(outputs[row], logits[row] - 0.5 * counts, rtol=1e-6)


def test_contracts():
    helpers.assert_contracts(FrequencyPenalty(1.0))


def test_invalid_value():
    with pytest.raises(ValueError):
        FrequencyPenalty(float("nan"))
