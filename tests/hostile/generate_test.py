"""Hostile `generate` calls on every backend: each is refused by name before
any compile, or gives the result the documentation promises (no NaN, no
hang, no silent change of meaning)."""

import numpy as np
import pytest

from tests.text_models import tiny_text_lm

VOCABULARY = 300


@pytest.fixture(scope="module")
def lm():
    return tiny_text_lm()


@pytest.mark.parametrize(
    "inputs, options, error, match",
    [
        ("", {}, ValueError, "empty prompt"),
        (["", "The"], {}, ValueError, "empty prompt"),
        ([], {}, TypeError, "`inputs`"),
        (5, {}, TypeError, "`inputs`"),
        ("a\ud800b", {}, ValueError, "lone surrogate"),
        ([[-1, 5]], {}, ValueError, "outside the vocabulary"),
        ([[5, 10**6]], {}, ValueError, "outside the vocabulary"),
        (np.array([[1.5, 2.0]]), {}, TypeError, "int token ids"),
        ("The", {"max_new_tokens": 0}, ValueError, "max_new_tokens"),
        ("The", {"max_new_tokens": -1}, ValueError, "max_new_tokens"),
        (
            "The",
            {"max_new_tokens": 10**9},
            ValueError,
            "beyond the model's 256 positions",
        ),
        ("The", {"max_length": 10**9}, ValueError, "beyond the model's 256 positions"),
        (
            "The " * 1000,
            {"max_new_tokens": 4},
            ValueError,
            "beyond the model's 256 positions",
        ),
        ("The", {"temperature": float("nan")}, ValueError, "temperature"),
        ("The", {"temperature": -1.0}, ValueError, "temperature"),
        ("The", {"top_p": float("inf")}, ValueError, "top_p"),
        ("The", {"typical_p": 0.0}, ValueError, "typical_p"),
        ("The", {"repetition_penalty": 1e-9}, ValueError, "repetition_penalty"),
        ("The", {"repetition_penalty": 1e9}, ValueError, "repetition_penalty"),
        ("The", {"presence_penalty": 1e30}, ValueError, "presence_penalty"),
        ("The", {"frequency_penalty": -1e30}, ValueError, "frequency_penalty"),
        ("The", {"logit_bias": {5: 1e30}}, ValueError, "logit_bias"),
        ("The", {"logit_bias": {5: float("inf")}}, ValueError, "logit_bias"),
        (
            "The",
            {"logit_bias": {10**6: 1.0}},
            ValueError,
            "LogitBias refers to token ids outside",
        ),
        (
            "The",
            {"num_beams": 4, "num_return_sequences": 5},
            ValueError,
            "num_return_sequences",
        ),
        ("The", {"eos_token_id": 10**6}, ValueError, "stop_token_ids"),
        ("The", {"stop_strings": ["x" * 10_000]}, ValueError, "stop_strings"),
        ("The", {"stop_strings": [""]}, ValueError, "stop_strings"),
        ("The", {"temprature": 0.5}, TypeError, "temprature"),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_a_hostile_call_is_refused_by_name(lm, inputs, options, error, match):
    if "max_length" not in options:
        options = {"max_new_tokens": 4, **options}
    with pytest.raises(error, match=match):
        lm.generate(inputs, **options)


def ids(lm, text="The for statement"):
    return [lm.tokenizer.encode(text)]


@pytest.mark.parametrize(
    "options",
    [
        {"suppress_tokens": list(range(VOCABULARY))},
        {"bad_words_ids": [[t] for t in range(VOCABULARY)]},
        {"logit_bias": {t: float("-inf") for t in range(VOCABULARY)}},
    ],
    ids=["suppress all", "ban all", "bias all to -inf"],
)
def test_banning_every_token_falls_back_on_the_model_logits(lm, options):
    # Documented: a row the processors leave without a finite logit
    # samples from its unprocessed logits, never from NaN.
    plain = lm.generate(ids(lm), max_new_tokens=6, temperature=1.0, seed=1)
    banned = lm.generate(ids(lm), max_new_tokens=6, temperature=1.0, seed=1, **options)
    assert banned == plain


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": 1e-30},
        {"temperature": 1e30, "seed": 1},
        {"top_p": 1e-9, "temperature": 1.0, "seed": 1},
        {"min_p": 1.0, "temperature": 1.0, "seed": 1},
        {"top_k": 1, "temperature": 1.0, "seed": 1},
        {"top_k": 2**31 - 1, "temperature": 1.0, "seed": 1},
    ],
    ids=repr,
)
def test_extreme_sampling_numbers_give_tokens_of_the_vocabulary(lm, options):
    tokens = lm.generate(ids(lm), max_new_tokens=6, stop_token_ids=[], **options)[0]
    assert len(tokens) == len(ids(lm)[0]) + 6
    assert all(0 <= t < VOCABULARY for t in tokens)


def test_a_nearly_zero_temperature_or_top_p_is_greedy(lm):
    greedy = lm.generate(ids(lm), max_new_tokens=6)
    assert lm.generate(ids(lm), max_new_tokens=6, temperature=1e-30) == greedy
    assert (
        lm.generate(ids(lm), max_new_tokens=6, temperature=1.0, top_p=1e-9, seed=4)
        == greedy
    )


@pytest.mark.parametrize("seed", [-1, 0, 2**31, 2**70])
def test_any_int_seed_is_repeatable(lm, seed):
    first = lm.generate(ids(lm), max_new_tokens=5, temperature=1.0, seed=seed)
    assert lm.generate(ids(lm), max_new_tokens=5, temperature=1.0, seed=seed) == first


@pytest.mark.parametrize("stop", ["😀", "The", "\x00", "a" * 32])
def test_an_odd_stop_string_never_cuts_into_the_prompt(lm, stop):
    text = lm.generate("The for statement", max_new_tokens=6, stop_strings=[stop])
    assert text.startswith("The for statement")
