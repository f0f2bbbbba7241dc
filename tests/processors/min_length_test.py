import numpy as np
import pytest
import torch
from keras import ops
from transformers.generation import logits_process as hf

from keras_gen.processors import MinLength
from tests.processors import helpers


@pytest.mark.parametrize("min_length", [5, 8, 9, 12])
def test_matches_transformers_min_length(min_length):
    helpers.assert_parity(
        MinLength(min_length=min_length, stop_token_ids=[2, 3]),
        hf.MinLengthLogitsProcessor(min_length, [2, 3]),
    )


@pytest.mark.parametrize("min_new_tokens", [1, 3, 6])
def test_matches_transformers_min_new_tokens(min_new_tokens):
    # transformers counts from one prompt length for the whole batch; our
    # rows each count from their own, so compare one prompt length at a time.
    logits, prompt, index, _ = helpers.random_case(0)
    for prompt_length in (2, 5, 8):
        mask = np.broadcast_to(np.arange(prompt.shape[1]) < prompt_length, prompt.shape)
        ours = helpers.run(
            MinLength(min_new_tokens=min_new_tokens, stop_token_ids=[2]),
            logits,
            prompt,
            index,
            mask,
        )
        theirs = hf.MinNewTokensLengthLogitsProcessor(prompt_length, min_new_tokens, 2)(
            torch.as_tensor(prompt[:, :index], dtype=torch.long),
            torch.as_tensor(logits),
        ).numpy()
        np.testing.assert_array_equal(ours, theirs)


def test_uses_call_stop_token_ids():
    logits, prompt, index, mask = helpers.random_case(0)
    outputs = helpers.run(
        MinLength(min_length=20),
        logits,
        prompt,
        index,
        mask,
        stop_token_ids=ops.convert_to_tensor([4, -1], "int32"),
    )
    assert np.isinf(outputs[:, 4]).all()
    np.testing.assert_array_equal(np.delete(outputs, 4, 1), np.delete(logits, 4, 1))


def test_contracts():
    helpers.assert_contracts(MinLength(min_length=3, stop_token_ids=[1]))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"min_length": 0},
        {"min_new_tokens": -1},
        {"min_length": 2, "stop_token_ids": [-1]},
    ],
)
def test_invalid(kwargs):
    with pytest.raises((ValueError, TypeError)):
        MinLength(**kwargs)
