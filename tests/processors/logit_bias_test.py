import pytest
from transformers.generation import logits_process as hf

from keras_gen.processors import LogitBias
from tests.processors import helpers

BIAS = {3: 2.5, 7: -1.0, (1, 2): 4.0, (0, 4, 5): -3.0, (5, 5): float("-inf")}


def test_matches_transformers_sequence_bias():
    hf_bias = [[list(k) if isinstance(k, tuple) else [k], v] for k, v in BIAS.items()]
    helpers.assert_parity(
        LogitBias(BIAS), hf.SequenceBiasLogitsProcessor(hf_bias), seeds=range(8)
    )


def test_contracts():
    helpers.assert_contracts(LogitBias(BIAS))


@pytest.mark.parametrize("bias", [{}, {-1: 1.0}, {1: "a"}, [1]])
def test_invalid_bias(bias):
    with pytest.raises((ValueError, TypeError)):
        LogitBias(bias)
