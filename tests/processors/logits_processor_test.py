"""The processor base, the registry, and processors inside generate."""

import numpy as np
import pytest
from keras import ops

from keras_gen import processors
from keras_gen.processors import LogitsProcessor
from keras_gen.samplers import GreedySampler


class BanToken(LogitsProcessor):
    """A user processor: bans one token (program structure, not tunable)."""

    def __init__(self, token):
        self.token = token

    def __call__(self, logits, prompt, index, mask):
        banned = ops.arange(ops.shape(logits)[-1]) == self.token
        return ops.where(banned[None, :], float("-inf"), logits)

    def get_config(self):
        return {"token": self.token}


def test_user_subclass_in_generate(gpt2_lm):
    plain = gpt2_lm.generate([1, 2, 3], max_new_tokens=6)
    token = plain[3]
    banned = gpt2_lm.generate([1, 2, 3], max_new_tokens=6, processors=[BanToken(token)])
    assert token not in banned[3:]


def test_compile_sets_defaults_and_generate_overrides(gpt2_lm):
    plain = gpt2_lm.generate([1, 2, 3], max_new_tokens=6)
    gpt2_lm.compile(processors=[BanToken(plain[3])])
    assert gpt2_lm.generate([1, 2, 3], max_new_tokens=6)[3] != plain[3]
    assert gpt2_lm.generate([1, 2, 3], max_new_tokens=6, processors=[]) == plain


def test_registry_round_trip():
    processor = processors.get({"name": "no_repeat_ngram", "config": {"n": 4}})
    assert processors.serialize(processor) == {
        "name": "no_repeat_ngram",
        "config": {"n": 4},
    }
    with pytest.raises(ValueError, match="processor"):
        processors.get("nope")


def test_tunable_numbers_do_not_retrace(gpt2_lm, traces):
    P = processors

    def chain(scale):
        return [
            P.RepetitionPenalty(1.1 * scale),
            P.PresencePenalty(0.2 * scale),
            P.FrequencyPenalty(0.1 * scale),
            P.NoRepeatNGram(1 + int(scale)),
            P.BadWords([[5], [int(scale), 9]]),
            P.LogitBias({7: scale}),
            P.SuppressTokens([int(scale) + 10]),
            P.MinLength(min_new_tokens=int(scale) + 1, min_length=4),
            P.TopK(10 + int(scale)),
            P.TopP(0.5 + 0.1 * scale),
            P.MinP(0.01 * scale),
            P.Typical(0.5 + 0.1 * scale),
        ]

    gpt2_lm.generate(
        [1, 2, 3], max_new_tokens=4, processors=chain(1), stop_token_ids=[0]
    )
    first = traces()
    assert first >= 1
    for scale in (2, 3):
        gpt2_lm.generate(
            [1, 2, 3],
            max_new_tokens=4,
            processors=chain(scale),
            stop_token_ids=[0],
            stop_sequences=[[scale, 4]],
        )
    assert traces() == first


def test_new_chain_compiles_once_and_is_cached(gpt2_lm, traces):
    a = [processors.RepetitionPenalty(1.5)]
    b = [processors.NoRepeatNGram(2), processors.RepetitionPenalty(1.5)]
    gpt2_lm.generate([1, 2], max_new_tokens=3, processors=a)
    after_a = traces()
    gpt2_lm.generate([1, 2], max_new_tokens=3, processors=b)
    after_b = traces()
    assert after_b > after_a
    gpt2_lm.generate(
        [1, 2], max_new_tokens=3, processors=[processors.RepetitionPenalty(2.0)]
    )
    gpt2_lm.generate([1, 2], max_new_tokens=3, processors=b)
    assert traces() == after_b
    assert len(gpt2_lm.programs) == 2
    gpt2_lm.compile()
    assert gpt2_lm.generate_function is None
    gpt2_lm.generate([1, 2], max_new_tokens=3, processors=b)
    assert traces() == after_b


def test_processors_run_before_temperature():
    # A +1.5 bias on token 1 before temperature 0.5: [2, 2.5, 0] / 0.5,
    # token 1 wins; after it, [4, 2 + 1.5, 0]: token 0 would.
    def next(prompt, state, index):
        logits = ops.convert_to_tensor([[2.0, 1.0, 0.0]])
        return logits, None, state

    prompt = np.zeros((1, 2), "int32")
    sampler = GreedySampler(temperature=0.5)
    out = sampler(
        next,
        prompt,
        ops.zeros(()),
        index=1,
        processors=[processors.LogitBias({1: 1.5})],
    )
    assert ops.convert_to_numpy(out).tolist() == [[0, 1]]


def test_all_banned_row_falls_back_to_model_logits():
    def next(prompt, state, index):
        return ops.convert_to_tensor([[0.0, 3.0, 1.0]]), None, state

    sampler = GreedySampler()
    out = sampler(
        next,
        np.zeros((1, 2), "int32"),
        ops.zeros(()),
        index=1,
        processors=[processors.SuppressTokens([0, 1, 2])],
    )
    assert ops.convert_to_numpy(out).tolist() == [[0, 1]]


def test_ragged_batch_with_processors(gpt2_lm):
    chain = [processors.NoRepeatNGram(2), processors.RepetitionPenalty(1.3)]
    batch = gpt2_lm.generate([[1, 2, 3], [4, 5]], max_new_tokens=5, processors=chain)
    one = gpt2_lm.generate([4, 5], max_new_tokens=5, processors=chain)
    assert batch[1] == one
