"""Per-row numbers: a batch of rows with different settings, or positions,
gives each row what it gives alone."""

import types

import numpy as np
import pytest
from keras import ops

from keras_gen import processors as P
from keras_gen import samplers
from keras_gen.utils.tunable import stack_rows
from tests.processors import helpers

# Four instances of one structure per processor, with different numbers.
CASES = {
    "repetition": [P.RepetitionPenalty(v) for v in (1.3, 0.7, 1.0, 2.5)],
    "frequency": [P.FrequencyPenalty(v) for v in (0.5, -1.0, 0.0, 2.0)],
    "presence": [P.PresencePenalty(v) for v in (0.5, -1.0, 0.0, 2.0)],
    "no_repeat_ngram": [P.NoRepeatNGram(n) for n in (1, 2, 3, 16)],
    "bad_words": [
        P.BadWords(s) for s in ([[3], [1, 2]], [[5]], [[0, 4], [2]], [[1, 1, 1]])
    ],
    "logit_bias": [
        P.LogitBias(b)
        for b in ({4: 1.0, (0, 1): -2.0}, {3: -5.0}, {(2, 2): 3.0}, {0: float("-inf")})
    ],
    "suppress": [P.SuppressTokens(t) for t in ([5], [0, 1], [23], [2, 3, 4])],
    "min_length": [
        P.MinLength(min_length=a, min_new_tokens=b, stop_token_ids=s)
        for a, b, s in ((9, None, [6]), (None, 3, [1, 2]), (4, 2, [0]), (12, 12, [5]))
    ],
    "forced_eos": [
        P.ForcedEOS(e, max_length=m) for e, m in ((7, 9), (1, 10), (2, 8), (3, 11))
    ],
    "top_k": [P.TopK(k) for k in (1, 3, 24, 100)],
    "top_p": [P.TopP(p) for p in (0.1, 0.5, 0.95, 1.0)],
    "min_p": [P.MinP(p) for p in (0.01, 0.2, 0.9, 1.0)],
    "typical": [P.Typical(p) for p in (0.2, 0.5, 0.95, 1.0)],
}
INDICES = [8, 6, 9, 11]


def _alone(processor, logits, prompt, mask, row):
    bound = processor.with_parameters(processor.get_parameter_tensors(), rows=1)
    return helpers.run(
        bound,
        logits[row : row + 1],
        prompt[row : row + 1],
        [[INDICES[row]]],
        mask[row : row + 1],
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_processor_rows_with_their_own_numbers_and_positions(name):
    instances = CASES[name]
    for seed in range(3):
        logits, prompt, _, mask = helpers.random_case(seed)
        prompt[:, 8:] = np.random.default_rng(seed).integers(0, 6, (4, 4))
        expected = np.concatenate(
            [_alone(p, logits, prompt, mask, r) for r, p in enumerate(instances)]
        )
        rows = {k: ops.convert_to_tensor(v) for k, v in stack_rows(instances).items()}
        batched = instances[0].with_parameters(rows)
        index = np.asarray(INDICES, "int32")[:, None]
        ours = helpers.run(batched, logits, prompt, index, mask)
        np.testing.assert_array_equal(ours, expected)


def test_equal_rows_equal_one_number():
    # `generate` hands every row the same number: the same as a scalar.
    logits, prompt, index, mask = helpers.random_case(0)
    processor = P.NoRepeatNGram(2)
    scalar = helpers.run(processor, logits, prompt, index, mask)
    rows = processor.with_parameters(processor.get_parameter_tensors(), rows=4)
    np.testing.assert_array_equal(
        helpers.run(rows, logits, prompt, np.full((4, 1), index), mask), scalar
    )


def test_sampler_filters_per_row():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 30)).astype("float32") * 3
    settings = [
        dict(top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0),
        dict(top_k=3, top_p=1.0, min_p=0.0, typical_p=1.0),
        dict(top_k=0, top_p=0.5, min_p=0.1, typical_p=1.0),
        dict(top_k=10, top_p=0.9, min_p=0.0, typical_p=0.8),
    ]
    instances = [samplers.RandomSampler(**s) for s in settings]
    expected = np.concatenate(
        [
            ops.convert_to_numpy(
                s.with_parameters(s.get_parameter_tensors(), rows=1).filter_logits(
                    logits[r : r + 1]
                )
            )
            for r, s in enumerate(instances)
        ]
    )
    rows = {k: ops.convert_to_tensor(v) for k, v in stack_rows(instances).items()}
    ours = ops.convert_to_numpy(
        instances[0].with_parameters(rows).filter_logits(logits)
    )
    np.testing.assert_array_equal(ours, expected)


def test_temperature_zero_rows_take_the_argmax():
    # The engine's greedy requests share a sampling program: temperature 0.
    logits = np.random.default_rng(1).normal(size=(3, 30)).astype("float32")
    sampler = samplers.RandomSampler(top_k=5)
    rows = {
        "temperature": ops.convert_to_tensor([[0.0], [1.0], [0.0]]),
        "top_k": ops.convert_to_tensor([[5], [5], [5]], "int32"),
    }
    bound = sampler.with_parameters(rows)
    loop = types.SimpleNamespace(done=ops.convert_to_tensor([False, False, False]))
    seed = ops.convert_to_tensor([[0, 1], [0, 2], [0, 3]], "int32")
    tokens, scores = bound.choose(ops.convert_to_tensor(logits), seed, loop)
    tokens = ops.convert_to_numpy(tokens)
    assert tokens[0] == logits[0].argmax() and tokens[2] == logits[2].argmax()
    np.testing.assert_allclose(ops.convert_to_numpy(scores), logits)


def test_with_parameters_leaves_the_object_alone():
    processor = P.RepetitionPenalty(1.5)
    bound = processor.with_parameters({"penalty": ops.convert_to_tensor(2.0)}, rows=3)
    assert processor.penalty == 1.5
    assert tuple(ops.shape(bound.penalty)) == (3, 1)
