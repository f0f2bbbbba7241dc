"""The engine's prompts: prefilled in chunks, and begun from cached
prefixes, with the tokens of a prompt computed whole."""

import time

import numpy as np
import pytest

from keras_gen import GenerationConfig
from keras_gen.serving import Engine
from tests.markers import ON_TORCH_ONLY
from tests.serving.engine_test import alone
from tests.serving.engine_test import assert_same
from tests.text_models import tiny_text_lm

TIMEOUT = 300


@pytest.fixture(scope="module")
def lm():
    return tiny_text_lm(max_sequence_length=128)


def prompt(length, seed):
    return [int(i) for i in np.random.default_rng(seed).integers(3, 300, length)]


def config(i, **options):
    """Greedy for even `i`, seeded sampling for odd, with log-probs."""
    base = dict(max_new_tokens=6, output_log_probs=True, top_logprobs=2)
    if i % 2:
        base.update(do_sample=True, seed=i, temperature=1.3, top_k=40)
    else:
        base.update(temperature=0.0)
    return GenerationConfig(**{**base, **options})


def chunked(lm, **options):
    """An engine of 4 slots that prefills in chunks of 16, a step per chunk."""
    return Engine(
        lm,
        max_batch_size=4,
        max_length=128,
        chunk_size=1,
        prefill_chunk_tokens=16,
        **options,
    )


def log_calls(engine):
    """The engine's prefill and decode chunk calls, in order, from now on."""
    calls = []

    def logged(method, name):
        def call(*args, **kwargs):
            calls.append(name)
            return method(*args, **kwargs)

        return call

    engine._prefill_chunk = logged(engine._prefill_chunk, "prefill")
    engine._decode_chunk = logged(engine._decode_chunk, "decode")
    return calls


def log_admits(engine):
    """The rows (slots, prompt lengths) of each admit program call."""
    calls = []
    admit_rows = engine._admit_rows

    def logged(key, slots, ends):
        calls.append((key[1], list(slots), list(ends)))
        return admit_rows(key, slots, ends)

    engine._admit_rows = logged
    return calls


def metric(engine, name):
    for line in engine.metrics.text().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(name)


@ON_TORCH_ONLY
def test_prefix_hits_equal_misses(lm):
    shared = prompt(37, seed=0)  # two blocks of 16, then 5 tokens
    requests = [(shared + prompt(9, seed=i), config(i)) for i in range(1, 5)] + [
        (shared, config(5)),
        (shared[:20], config(6)),
        (shared + [7], config(7)),
    ]
    with Engine(lm, max_batch_size=4, max_length=96, chunk_size=2) as engine:
        # The first two arrive together (admitted in one round); the rest
        # one at a time.
        first = [engine.submit(p, c) for p, c in requests[:2]]
        records = [h.result(timeout=TIMEOUT) for h in first]
        for p, c in requests[2:]:
            records.append(engine.submit(p, c).result(timeout=TIMEOUT))
        hits = metric(engine, "keras_gen_prefix_cache_hits_total")
        queries = metric(engine, "keras_gen_prefix_cache_queries_total")
        assert metric(engine, "keras_gen_prefix_cache_bytes") > 0
    # Every request after the first reuses the two whole shared blocks
    # (the 20-token one: its first).
    assert hits == 16 * (2 * 5 + 1)
    assert queries == sum(len(p) for p, _ in requests)
    for record, (p, c) in zip(records, requests):
        assert_same(record, alone(lm, p, c))


@ON_TORCH_ONLY
def test_short_prompts_waiting_together_share_admit_calls(lm):
    # Six short prompts, a long one, a short one, all waiting at once: the
    # six go four and two to a call (the two padded to four rows: the last
    # repeated), then
    # the long one and the last each alone, oldest first.
    lengths = [5, 20, 9, 31, 12, 3, 40, 7]
    requests = [(prompt(n, seed=i), config(i)) for i, n in enumerate(lengths)]
    with Engine(lm, max_batch_size=8, max_length=128) as engine:
        admits = log_admits(engine)
        with engine._condition:  # the step thread admits them together
            handles = [engine.submit(p, c) for p, c in requests]
        records = [h.result(timeout=TIMEOUT) for h in handles]
    assert admits == [
        ((4, 32), [0, 1, 2, 3], [5, 20, 9, 31]),
        ((4, 16), [4, 5], [12, 3]),
        ((1, 64), [6], [40]),
        ((1, 16), [7], [7]),
    ]
    for record, (p, c) in zip(records, requests):
        assert_same(record, alone(lm, p, c))


@pytest.mark.only_backend("jax", "torch")
def test_completions_are_cached_for_the_next_turn(lm):
    first = prompt(12, seed=3)
    with Engine(lm, max_batch_size=2, max_length=96) as engine:
        record = engine.submit(first, config(0, max_new_tokens=30)).result(
            timeout=TIMEOUT
        )
        turn = first + record.token_ids[0] + prompt(5, seed=4)
        second = engine.submit(turn, config(2)).result(timeout=TIMEOUT)
        # The first prompt and its completion: 41 positions computed, two
        # whole blocks.
        assert metric(engine, "keras_gen_prefix_cache_hits_total") == 32
    assert_same(second, alone(lm, turn, config(2)))


@ON_TORCH_ONLY
def test_eviction_and_opting_out(lm):
    prompts = [prompt(40, seed=i % 3) for i in range(6)]
    # A block of the tiny model: 2 layers, keys and values, 2 heads x 16
    # positions x 16 floats: 8 KiB. Room for three.
    with Engine(
        lm, max_batch_size=2, max_length=64, prefix_cache_bytes=3 * 8192
    ) as engine:
        records = [
            engine.submit(p, config(i)).result(timeout=TIMEOUT)
            for i, p in enumerate(prompts)
        ]
        assert engine.prefix_cache.bytes <= 3 * 8192
        before = metric(engine, "keras_gen_prefix_cache_hits_total")
        engine.submit(prompts[0], config(0, cache_prompt=False)).result(timeout=TIMEOUT)
        assert metric(engine, "keras_gen_prefix_cache_hits_total") == before
    for record, (i, p) in zip(records, enumerate(prompts)):
        assert_same(record, alone(lm, p, config(i)))
    with Engine(lm, max_batch_size=2, max_length=64, prefix_cache_bytes=0) as engine:
        record = engine.submit(prompts[0], config(0)).result(timeout=TIMEOUT)
        record = engine.submit(prompts[0], config(0)).result(timeout=TIMEOUT)
        assert metric(engine, "keras_gen_prefix_cache_queries_total") == 0
    assert_same(record, alone(lm, prompts[0], config(0)))


@ON_TORCH_ONLY
def test_a_long_prompt_prefills_in_chunks_among_running_streams(lm):
    long = prompt(90, seed=9)
    with chunked(lm, prefix_cache_bytes=0) as engine:
        running = [
            engine.submit(prompt(5, seed=i), config(i, max_new_tokens=40))
            for i in range(3)
        ]
        # Wait for the first tokens: the three run when the long one comes.
        for handle in running:
            next(iter(handle))
        handle = engine.submit(long, config(1))
        record = handle.result(timeout=TIMEOUT)
        others = [h.result(timeout=TIMEOUT) for h in running]
    assert_same(record, alone(lm, long, config(1)))
    for other, i in zip(others, range(3)):
        assert_same(other, alone(lm, prompt(5, seed=i), config(i, max_new_tokens=40)))


@pytest.mark.only_backend("jax", "torch")
def test_a_chunk_as_long_as_the_cache_after_a_cached_prefix(lm):
    # A chunk padded to the cache's length starts at the prompt's start: it
    # runs the admit program (compiled at warm-up), not a new one.
    first, second = prompt(20, seed=4), prompt(20, seed=4) + prompt(40, seed=5)
    with Engine(lm, max_batch_size=2, max_length=64, prefill_chunk_tokens=64) as engine:
        engine.warm_up()
        before = engine.compilations
        engine.submit(first, config(0)).result(timeout=TIMEOUT)
        record = engine.submit(second, config(1, max_new_tokens=4)).result(
            timeout=TIMEOUT
        )
        assert metric(engine, "keras_gen_prefix_cache_hits_total") == 16
        assert engine.compilations == before
    assert_same(record, alone(lm, second, config(1, max_new_tokens=4)))


class Fixed(dict):
    """A dict that keeps its values: measurements written to it are lost."""

    def __setitem__(self, key, value):
        pass


# The schedule is host logic, alike on every backend: torch runs it fastest.
@pytest.mark.only_backend("torch")
def test_prefill_between_decode_chunks_takes_about_a_decode_chunks_time(lm):
    """Idle, a prompt prefills in consecutive chunks; among running
    streams, as many chunks as their measured times fit in a decode
    chunk's (and at least one) run between two decode chunks."""
    with chunked(lm) as engine:
        engine.warm_up()
        assert None not in engine._prefill_seconds.values()  # all measured
        # Every prefill program measured slower than any decode chunk.
        engine._prefill_seconds = dict.fromkeys(engine._prefill_seconds, 100.0)
        calls = log_calls(engine)
        first = engine.submit(prompt(60, seed=1), config(0, max_new_tokens=60))
        next(iter(first))
        idle = list(calls)
        del calls[:]
        engine.submit(prompt(60, seed=2), config(1, max_new_tokens=2)).result(
            timeout=TIMEOUT
        )
        slow = list(calls)
        # Now a decode step measured slower than four prefill chunks (and
        # kept so: the step thread measures as it runs).
        engine._step_seconds = Fixed({False: 2000.0})
        del calls[:]
        engine.submit(prompt(60, seed=3), config(2, max_new_tokens=2)).result(
            timeout=TIMEOUT
        )
        fast = list(calls)
        first.result(timeout=TIMEOUT)
    assert idle[:5] == ["prefill"] * 4 + ["decode"]
    prefills = [i for i, name in enumerate(slow) if name == "prefill"]
    assert len(prefills) == 4 and all(slow[i + 1] == "decode" for i in prefills)
    start = fast.index("prefill")
    assert fast[start : start + 5] == ["prefill"] * 4 + ["decode"]
    # With no pause limit, prompts prefill whole among running streams.
    with chunked(lm, prefill_pause=float("inf")) as engine:
        engine.warm_up()
        engine._prefill_seconds = dict.fromkeys(engine._prefill_seconds, 100.0)
        first = engine.submit(prompt(60, seed=1), config(0, max_new_tokens=60))
        next(iter(first))
        calls = log_calls(engine)
        engine.submit(prompt(60, seed=2), config(1, max_new_tokens=2)).result(
            timeout=TIMEOUT
        )
        first.result(timeout=TIMEOUT)
    start = calls.index("prefill")
    assert calls[start : start + 5] == ["prefill"] * 4 + ["decode"]


@pytest.mark.only_backend("torch")
def test_a_burst_of_prompts_prefills_longer_between_decode_chunks(lm):
    """While the rows waiting for their prompts outnumber the rows a decode
    chunk serves, prefill runs longer than a decode chunk's time: a burst
    of requests gets its first tokens sooner."""
    with Engine(
        lm, max_batch_size=8, max_length=128, chunk_size=1, prefill_chunk_tokens=16
    ) as engine:
        engine.warm_up()
        # Each prefill chunk takes 1 s, a decode step 3 s: one 40-token
        # prompt (3 chunks) fits in a decode chunk's time.
        engine._prefill_seconds = Fixed(dict.fromkeys(engine._prefill_seconds, 1.0))
        engine._step_seconds = Fixed({False: 3.0})
        prefill_chunk, decode_chunk = engine._prefill_chunk, engine._decode_chunk

        def prefill_chunk_of_a_second(*args):
            prefill_chunk(*args)
            return 1.0

        def slow_decode_chunk(**options):  # the first runs until the burst is in
            time.sleep(0.05)
            return decode_chunk(**options)

        engine._prefill_chunk = prefill_chunk_of_a_second
        engine._decode_chunk = slow_decode_chunk
        first = engine.submit(prompt(5, seed=1), config(0, max_new_tokens=100))
        next(iter(first))
        calls = log_calls(engine)
        with engine._condition:  # the 7 arrive together
            burst = [
                engine.submit(prompt(40, seed=10 + i), config(i, max_new_tokens=2))
                for i in range(7)
            ]
        records = [handle.result(timeout=TIMEOUT) for handle in burst]
        first.result(timeout=TIMEOUT)
    # 1 running row, 7 waiting: 2 prompts before the first decode chunk
    # (7 / 1 decode chunks' time, then 6 / 2 once the first is done: 6
    # chunks), then 5 waiting for 3 rows: one more prompt.
    assert calls[:7] == ["prefill"] * 6 + ["decode"]
    assert calls[7:11] == ["prefill"] * 3 + ["decode"]
    for record, i in zip(records, range(7)):
        assert_same(
            record, alone(lm, prompt(40, seed=10 + i), config(i, max_new_tokens=2))
        )


def test_bad_settings_are_refused(lm):
    with pytest.raises(ValueError, match="prefill_chunk_tokens"):
        Engine(lm, prefill_chunk_tokens=8)
    with pytest.raises(ValueError, match="prefix_cache_bytes"):
        Engine(lm, prefix_cache_bytes=-1)
    for pause in (-1, float("nan"), float("-inf")):
        with pytest.raises(ValueError, match="prefill_pause"):
            Engine(lm, prefill_pause=pause)
    with pytest.raises(TypeError, match="prefill_pause"):
        Engine(lm, prefill_pause="1")
    with pytest.raises(TypeError, match="cache_prompt"):
        GenerationConfig(cache_prompt="yes")
