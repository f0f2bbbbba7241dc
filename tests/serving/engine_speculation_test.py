"""Speculative decoding (prompt lookup and a draft model) in the engine's
shared step."""

import numpy as np
import pytest

from keras_gen import GenerationConfig
from keras_gen.serving import Engine
from tests.markers import ON_TORCH_ONLY
from tests.serving.engine_prefill_test import chunked
from tests.serving.engine_prefill_test import log_calls
from tests.serving.engine_prefill_test import metric
from tests.serving.engine_test import PROMPTS
from tests.serving.engine_test import STRUCTURED
from tests.serving.engine_test import alone
from tests.serving.engine_test import assert_same
from tests.text_models import tiny_text_lm

TIMEOUT = 300


@pytest.fixture(scope="module")
def lm():
    return tiny_text_lm(max_sequence_length=128)


@pytest.fixture(scope="module")
def draft():
    """Other weights, the same vocabulary: it proposes badly."""
    return tiny_text_lm(seed=1, max_sequence_length=128)


def repeating(length, seed):
    """A prompt that repeats a random 7-token phrase."""
    phrase = [int(i) for i in np.random.default_rng(seed).integers(3, 300, 7)]
    return (phrase * (length // 7 + 1))[:length]


def config(i, **options):
    """Greedy for even `i`, seeded sampling for odd, with log-probs."""
    base = dict(max_new_tokens=12, output_log_probs=True, top_logprobs=2)
    if i % 2:
        base.update(do_sample=True, seed=i, temperature=1.3, top_k=40)
    else:
        base.update(temperature=0.0)
    return GenerationConfig(**{**base, **options})


def without_speculation(config):
    return config.replace(prompt_lookup_ngram=None, num_speculative_tokens=None)


@ON_TORCH_ONLY
def test_mixed_rows_equal_generate_with_and_without_speculation(lm):
    # Rows that speculate (n-grams of 1-3, 2 or 3 tokens a step) run beside
    # rows that do not, in one step.
    requests = []
    for i in range(8):
        options = {}
        if i % 4 != 3:
            options = dict(
                prompt_lookup_ngram=1 + i % 3, num_speculative_tokens=2 + i % 2
            )
        requests.append((repeating(20 + 3 * i, seed=i), config(i, **options)))
    with Engine(
        lm, max_batch_size=4, max_length=96, num_speculative_tokens=3
    ) as engine:
        handles = [engine.submit(p, c) for p, c in requests]
        records = [h.result(timeout=TIMEOUT) for h in handles]
        drafted = metric(engine, "keras_gen_speculative_draft_tokens_total")
        accepted = metric(engine, "keras_gen_speculative_accepted_tokens_total")
    assert 0 < accepted <= drafted
    for record, (p, c) in zip(records, requests):
        # Sampled: the tokens of `generate` with the same speculation.
        assert_same(record, alone(lm, p, c))
        if not c.do_sample:  # greedy: those of plain decoding, too
            assert record.token_ids == alone(lm, p, without_speculation(c)).token_ids


@ON_TORCH_ONLY
def test_a_prompt_prefilled_between_speculative_steps(lm):
    # A slot that waits for the rest of its prompt stands (done, at
    # position 1) in the running rows' speculative steps: they must leave
    # its cache rows and tokens as its prefill wrote them.
    running = repeating(30, seed=1), config(0, max_new_tokens=40, prompt_lookup_ngram=1)
    waiting = repeating(60, seed=7), config(7)
    with chunked(
        lm, num_speculative_tokens=3, prefix_cache_bytes=0, prefill_pause=0.0
    ) as engine:
        calls = log_calls(engine)
        first = engine.submit(*running)
        next(iter(first))
        del calls[:]
        record = engine.submit(*waiting).result(timeout=TIMEOUT)
        first.result(timeout=TIMEOUT)
        drafted = metric(engine, "keras_gen_speculative_draft_tokens_total")
    # Decode chunks ran between its four chunks (16 positions each).
    last = len(calls) - calls[::-1].index("prefill")
    assert calls.count("prefill") == 4
    assert "decode" in calls[calls.index("prefill") : last]
    assert drafted > 0
    assert_same(record, alone(lm, *waiting))


# Compiles counted by XLA; torch's compiled step took 4 minutes here, and
# TensorFlow's as long.
@pytest.mark.only_backend("jax")
def test_rows_near_the_model_limit_and_no_compile_after_warm_up(lm):
    # Verifying writes positions past a row's end, here past the model's
    # 128 positions too.
    prompt = repeating(100, seed=5)
    requests = [
        (prompt, config(0, max_new_tokens=28, prompt_lookup_ngram=3)),
        (prompt[:90], config(1, max_new_tokens=38, prompt_lookup_ngram=1)),
        (prompt[:50], config(2, max_new_tokens=20)),
    ]
    with Engine(
        lm, max_batch_size=4, max_length=128, num_speculative_tokens=4
    ) as engine:
        engine.warm_up()
        compiled = engine.compilations
        for _ in range(2):
            handles = [engine.submit(p, c) for p, c in requests]
            records = [h.result(timeout=TIMEOUT) for h in handles]
        assert engine.compilations == compiled
    for record, (p, c) in zip(records, requests):
        assert np.isfinite(record.log_probs[0]).all()
        assert_same(record, alone(lm, p, c))


@pytest.mark.only_backend("jax")
def test_structured_outputs_with_speculation(lm):
    # A draft that leaves the language is rejected: the automaton's state
    # follows each row's kept tokens only.
    requests = [
        (
            PROMPTS[i % len(PROMPTS)],
            config(
                i,
                max_new_tokens=30,
                prompt_lookup_ngram=2,
                response_format=STRUCTURED[i % len(STRUCTURED)],
            ),
        )
        for i in range(4)
    ]
    with Engine(
        lm, max_batch_size=4, max_length=64, num_speculative_tokens=4
    ) as engine:
        handles = [engine.submit(p, c) for p, c in requests]
        records = [h.result(timeout=TIMEOUT) for h in handles]
    for record, (p, c) in zip(records, requests):
        assert_same(record, alone(lm, p, c))
        if not c.do_sample:
            assert record.token_ids == alone(lm, p, without_speculation(c)).token_ids


def test_speculation_errors(lm):
    with Engine(lm, max_batch_size=2, max_length=64) as engine:
        with pytest.raises(ValueError, match="num_speculative_tokens=4"):
            engine.submit([5, 6, 7], prompt_lookup_ngram=2)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        Engine(lm, num_speculative_tokens=33)
    with Engine(
        lm, max_batch_size=2, max_length=64, num_speculative_tokens=2
    ) as engine:
        with pytest.raises(ValueError, match="must be <= 2"):
            engine.submit([5, 6, 7], prompt_lookup_ngram=2, num_speculative_tokens=3)
        with pytest.raises(ValueError, match="needs `prompt_lookup_ngram`"):
            engine.submit([5, 6, 7], num_speculative_tokens=2)
        with pytest.raises(ValueError, match="prompt_lookup_ngram"):
            engine.submit([5, 6, 7], prompt_lookup_ngram=0)


@pytest.mark.only_backend("jax", "torch")
# The model as its own draft on torch only: a minute of compiles on jax.
@pytest.mark.parametrize(
    "proposer", [pytest.param("self", marks=ON_TORCH_ONLY), "draft"]
)
def test_a_draft_model_in_the_engine_equals_generate(lm, draft, proposer):
    # Each request proposes up to its own count (1-3 of the engine's 3):
    # its tokens and log-probs are those of `generate` with the draft (and
    # greedy ones those of plain decoding), whatever the other rows do.
    # The model as its own draft has every proposal accepted.
    draft = lm if proposer == "self" else draft
    requests = [
        (repeating(20 + 3 * i, seed=i), config(i, num_speculative_tokens=1 + i % 3))
        for i in range(6)
    ]
    with Engine(
        lm, max_batch_size=4, max_length=96, num_speculative_tokens=3, draft_model=draft
    ) as engine:
        handles = [engine.submit(p, c) for p, c in requests]
        records = [h.result(timeout=TIMEOUT) for h in handles]
        drafted = metric(engine, "keras_gen_speculative_draft_tokens_total")
        accepted = metric(engine, "keras_gen_speculative_accepted_tokens_total")
    assert drafted > 0
    assert (accepted == drafted) if proposer == "self" else (accepted < drafted)
    for record, (p, c) in zip(records, requests):
        assert_same(record, alone(lm, p, c, draft_model=draft))
        if not c.do_sample:
            assert record.token_ids == alone(lm, p, without_speculation(c)).token_ids


@pytest.mark.only_backend("jax")
def test_a_draft_models_cache_rows_follow_prefills_and_prefix_hits(lm):
    # The draft's cache rows are filled with the target's: in prefill
    # chunks beside speculative steps, and from the prefix cache. The model
    # as its own draft keeps every proposal only if they hold the prompt.
    # (No warm-up: a draft engine has the programs of any speculating one,
    # whose no-compile test is above.)
    long, short = repeating(60, seed=7), repeating(30, seed=1)
    with chunked(
        lm,
        num_speculative_tokens=3,
        draft_model=lm,
        prefill_pause=0.0,
    ) as engine:
        first = engine.submit(short, config(0, max_new_tokens=40))
        next(iter(first))
        requests = [config(i, num_speculative_tokens=3) for i in (2, 3)]
        records = [engine.submit(long, c).result(timeout=TIMEOUT) for c in requests]
        first.result(timeout=TIMEOUT)
        hits = metric(engine, "keras_gen_prefix_cache_hits_total")
        drafted = metric(engine, "keras_gen_speculative_draft_tokens_total")
        accepted = metric(engine, "keras_gen_speculative_accepted_tokens_total")
    assert hits >= 48  # the second long prompt's whole blocks
    assert accepted == drafted > 0
    for record, c in zip(records, requests):
        assert_same(record, alone(lm, long, c, draft_model=lm))


def test_draft_model_errors(lm):
    with pytest.raises(TypeError, match="draft_model"):
        Engine(lm, draft_model="small")
    small = tiny_text_lm(max_sequence_length=64)
    with pytest.raises(ValueError, match="draft model's 64 positions"):
        Engine(lm, max_length=128, draft_model=small)
    with Engine(lm, max_batch_size=2, max_length=64, draft_model=lm) as engine:
        assert engine.num_speculative_tokens == 4  # the default
        with pytest.raises(ValueError, match="drafts with its `draft_model`"):
            engine.submit([5, 6, 7], prompt_lookup_ngram=2)
        with pytest.raises(ValueError, match="must be <= 4"):
            engine.submit([5, 6, 7], num_speculative_tokens=5)
