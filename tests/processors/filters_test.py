"""TopK, TopP, MinP and Typical against transformers' warpers."""

import numpy as np
import pytest
from transformers.generation import logits_process as hf

from keras_gen.processors import MinP
from keras_gen.processors import TopK
from keras_gen.processors import TopP
from keras_gen.processors import Typical
from tests.processors import helpers

CASES = [
    (TopK(1), hf.TopKLogitsWarper(1)),
    (TopK(5), hf.TopKLogitsWarper(5)),
    (TopP(0.3), hf.TopPLogitsWarper(0.3)),
    (TopP(0.9), hf.TopPLogitsWarper(0.9)),
    (TopP(1.0), hf.TopPLogitsWarper(1.0)),
    (MinP(0.05), hf.MinPLogitsWarper(0.05)),
    (MinP(0.5), hf.MinPLogitsWarper(0.5)),
    (Typical(0.2), hf.TypicalLogitsWarper(0.2)),
    (Typical(0.9), hf.TypicalLogitsWarper(0.9)),
]


@pytest.mark.parametrize(
    "ours, theirs",
    CASES,
    # Stable ids (no object addresses): workers of a parallel run agree.
    ids=[f"{type(ours).__name__}-{ours.get_config()}" for ours, _ in CASES],
)
def test_matches_transformers(ours, theirs):
    helpers.assert_parity(ours, theirs, seeds=range(8))


@pytest.mark.parametrize("processor", [c[0] for c in CASES])
def test_contracts(processor):
    helpers.assert_contracts(processor)


@pytest.mark.parametrize(
    "make",
    [
        lambda: TopK(0),
        lambda: TopP(0.0),
        lambda: TopP(1.5),
        lambda: MinP(-0.1),
        lambda: Typical(2.0),
    ],
)
def test_invalid(make):
    with pytest.raises(ValueError):
        make()


def test_all_inf_row_stays_all_inf():
    logits = np.full((1, helpers.VOCAB), -np.inf, "float32")
    prompt, mask = np.zeros((1, 4), "int32"), np.ones((1, 4), bool)
    for processor in [c[0] for c in CASES]:
        outputs = helpers.run(processor, logits, prompt, 2, mask)
        assert np.isneginf(outputs).all()
