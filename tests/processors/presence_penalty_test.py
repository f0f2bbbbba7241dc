import numpy as np
import pytest

from keras_gen.processors import PresencePenalty
from tests.processors import helpers


def test_counts_generated_tokens_once():
    logits, prompt, index, mask = helpers.random_case(0)
    outputs = helpers.run(PresencePenalty(0.75), logits, prompt, index, mask)
    for row in range(len(prompt)):
        generated = prompt[row, :index][~mask[row, :index]]
        expected = logits[row].copy()
        expected[np.unique(generated)] -= 0.75
        np.testing.assert_allclose(outputs[row], expected, rtol=1e-6)


def test_contracts():
    helpers.assert_contracts(PresencePenalty(-0.5))


@pytest.mark.parametrize("value", [float("inf"), "1"])
def test_invalid_value(value):
    with pytest.raises((ValueError, TypeError)):
        PresencePenalty(value)
