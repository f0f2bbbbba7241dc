"""The continuous-batching engine: every request as if it ran alone."""

import asyncio
import re
import threading
import time

import numpy as np
import pytest

from keras_gen import GenerationConfig
from keras_gen.generation import options as options_lib
from keras_gen.serving import Engine
from keras_gen.serving import EngineClosed
from keras_gen.serving import EngineFull
from tests.markers import ON_TORCH_ONLY
from tests.text_models import PROMPTS
from tests.text_models import tiny_text_lm

TIMEOUT = 300


@pytest.fixture(scope="module")
def lm():
    return tiny_text_lm(max_sequence_length=128)


@pytest.fixture(scope="module")
def engine(lm):
    with Engine(lm, max_batch_size=4, max_length=64, chunk_size=3) as engine:
        yield engine


def mixed_requests(count, seed=0):
    """`count` (prompt, config) pairs: greedy and seeded sampling with every
    per-row setting. Each sets a one-token bias and a minimum length, so
    that the references run few programs."""
    rng = np.random.default_rng(seed)
    requests = []
    for i in range(count):
        options = dict(
            max_new_tokens=int(rng.integers(3, 14)),
            logit_bias={int(rng.integers(0, 300)): float(rng.choice([-100.0, 3.0]))},
            min_new_tokens=int(rng.integers(1, 3)),
            repetition_penalty=float(rng.choice([1.0, 1.3])),
            presence_penalty=float(rng.choice([0.0, 0.7])),
            frequency_penalty=float(rng.choice([0.0, -0.4])),
            output_log_probs=True,
            top_logprobs=3,
        )
        if i % 2:
            options.update(
                do_sample=True,
                seed=int(rng.integers(0, 1000)),
                temperature=float(rng.choice([0.5, 1.0, 1.5])),
                top_k=int(rng.choice([0, 5, 40])),
                top_p=float(rng.choice([1.0, 0.8])),
                min_p=float(rng.choice([0.0, 0.1])),
            )
        else:
            options["temperature"] = 0.0
        if i % 5 == 0:
            options["stop_strings"] = ["e"]
        requests.append((PROMPTS[i % len(PROMPTS)], GenerationConfig(**options)))
    return requests


def alone(lm, prompt, config, **options):
    """`lm.generate` of the request alone (with `generate`'s `options`). Its
    sampler and processors carry every filter and penalty (neutral where
    not asked for), which changes no token and lets the references share a
    few programs."""
    _, sampler, processors = options_lib.resolve(
        GenerationConfig(), config, complete=True
    )
    return lm.generate(
        prompt,
        config.without("sampling", "processors"),
        sampler=sampler,
        processors=processors,
        return_dict=True,
        **options,
    )


def assert_same(record, alone):
    assert record.token_ids == alone.token_ids
    assert record.text == alone.text
    assert record.finish_reasons == alone.finish_reasons
    for ours, theirs in zip(record.log_probs, alone.log_probs):
        np.testing.assert_allclose(ours, theirs, atol=1e-4)
    for ours, theirs in zip(record.top_token_ids, alone.top_token_ids):
        np.testing.assert_array_equal(ours[:, 0], theirs[:, 0])


@ON_TORCH_ONLY
def test_staggered_mixed_requests_equal_each_request_alone(engine, lm):
    requests = mixed_requests(24)
    handles = [None] * len(requests)

    def arrive():
        for i, (prompt, config) in enumerate(requests):
            handles[i] = engine.submit(prompt, config)
            time.sleep(0.002 * (i % 4))

    thread = threading.Thread(target=arrive)
    thread.start()
    thread.join(TIMEOUT)
    records = [handle.result(TIMEOUT) for handle in handles]
    for (prompt, config), record in zip(requests, records):
        assert_same(record, alone(lm, prompt, config))


def test_more_prompts_than_slots_come_back_in_order(engine, lm):
    prompts = PROMPTS + PROMPTS[:3]
    records = engine.generate(prompts, max_new_tokens=5, temperature=0)
    assert [r.text for r in records] == [
        lm.generate(p, max_new_tokens=5, do_sample=False, return_dict=True).text
        for p in prompts
    ]
    # One config per prompt.
    configs = [GenerationConfig(max_new_tokens=n, temperature=0) for n in (2, 3)]
    records = engine.generate(PROMPTS[:2], configs)
    assert [len(r.token_ids[0]) for r in records] == [2, 3]


def test_n_rows_of_a_request_are_the_rows_of_generate(engine, lm):
    record = engine.submit(
        "The while", max_new_tokens=6, do_sample=True, seed=4, num_return_sequences=3
    ).result(TIMEOUT)
    expected = lm.generate(
        "The while",
        max_new_tokens=6,
        do_sample=True,
        seed=4,
        num_return_sequences=3,
        return_dict=True,
    )
    assert record.token_ids == expected.token_ids
    assert len(set(map(tuple, record.token_ids))) > 1


def test_streams_in_chunks_and_async(engine, lm):
    handle = engine.submit("The for statement", max_new_tokens=10, temperature=0)
    chunks = list(handle)
    assert len(chunks) > 1
    alone = lm.generate("The for statement", max_new_tokens=10, do_sample=False)
    assert "The for statement" + "".join(c.text[0] for c in chunks) == alone

    async def collect():
        handle = engine.submit("A class", max_new_tokens=7, temperature=0)
        return [chunk async for chunk in handle]

    chunks = asyncio.run(collect())
    assert "A class" + "".join(c.text[0] for c in chunks) == lm.generate(
        "A class", max_new_tokens=7, do_sample=False
    )


def test_cancel_frees_the_slot(engine):
    handles = [
        engine.submit("The", max_new_tokens=40, temperature=0, stop_token_ids=[])
        for _ in range(4)
    ]
    next(iter(handles[0]))
    for handle in handles:
        handle.cancel()
    deadline = time.monotonic() + TIMEOUT
    while engine.running or engine.waiting:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # The freed slots serve new requests.
    assert engine.submit("A class", max_new_tokens=3, temperature=0).result(TIMEOUT)


def test_no_compile_after_warm_up(lm, torch_compiled):
    # Prompts beyond 32 tokens prefill in chunks; the second 59-token one
    # begins from the first's cached blocks.
    with Engine(
        lm, max_batch_size=4, max_length=64, chunk_size=3, prefill_chunk_tokens=32
    ) as engine:
        engine.warm_up()
        before = engine.compilations
        # Any settings, prompt lengths, occupancy and lengths: no compile.
        engine.generate([p for p, _ in mixed_requests(8, seed=1)], max_new_tokens=4)
        for prompt, config in mixed_requests(8, seed=2):
            engine.submit(prompt, config).result(TIMEOUT)
        engine.submit(list(range(1, 60)), max_new_tokens=5).result(TIMEOUT)
        # Structured requests keep the tables' shapes: nothing compiles
        # after them either, for any occupancy or prompt length.
        for response_format in ({"regex": "[a-z]{2,5}"}, {"choice": ["yes", "no"]}):
            engine.submit("The", response_format=response_format, max_new_tokens=6)
        engine.submit(
            "A class", max_new_tokens=6, num_return_sequences=2, temperature=0.7, seed=1
        ).result(TIMEOUT)
        engine.submit(list(range(1, 60)), max_new_tokens=5).result(TIMEOUT)
        assert engine.compilations == before
        with pytest.raises(RuntimeError, match="before any request"):
            engine.submit("The", max_new_tokens=50, stop_token_ids=[])
            engine.warm_up()


@pytest.mark.only_backend("torch")
def test_one_compiled_step_serves_every_length_bucket(torch_compiled):
    # torch compiles one decode step for every length bucket (the cache is
    # read through a view whose length is symbolic): a short request
    # attends over 64 positions, a long one over 256 once it passes 64.
    lm = tiny_text_lm(max_sequence_length=256)
    with Engine(lm, max_batch_size=2, max_length=256, chunk_size=4) as engine:
        assert engine.length_buckets == [64, 256] and engine.row_buckets == [2]
        engine.warm_up()
        assert engine.compilations == 1
        common = dict(output_log_probs=True, top_logprobs=2, stop_token_ids=[])
        requests = [
            (PROMPTS[0], GenerationConfig(max_new_tokens=90, temperature=0, **common)),
            (PROMPTS[1], GenerationConfig(max_new_tokens=12, seed=3, **common)),
        ]
        handles = [engine.submit(p, c) for p, c in requests]
        records = [handle.result(TIMEOUT) for handle in handles]
        assert engine.compilations == 1
    for record, (prompt, config) in zip(records, requests):
        assert_same(record, alone(lm, prompt, config))


@pytest.mark.only_backend("torch")
def test_a_background_warm_up_serves_eagerly_until_its_step_compiles(
    lm, traces, monkeypatch
):
    # `warm_up(background=True)` returns before the decode step compiles:
    # requests run it eagerly meanwhile (the compiler is held here until
    # they are done), and the compiled step once it is ready, with no
    # compile on the step thread. Requests keep coming while the compile
    # runs (while torch.fx's tracer patches `torch.nn.Module`).
    import torch

    from keras_gen.backend import torch_backend

    release, compiler = threading.Event(), torch_backend._counting_compiler
    compiled_calls, compiled = [], torch_backend._compiled

    def held(graph, inputs):
        assert release.wait(TIMEOUT)
        return compiler(graph, inputs)

    def counted(body):
        compiled_calls.append(body)
        return compiled(body)

    monkeypatch.setattr(torch_backend, "_counting_compiler", held)
    monkeypatch.setattr(torch_backend, "_compiled", counted)
    threads = torch.get_num_threads()
    common = dict(output_log_probs=True, top_logprobs=2, stop_token_ids=[])
    requests = [
        (PROMPTS[0], GenerationConfig(max_new_tokens=70, temperature=0, **common)),
        (PROMPTS[1], GenerationConfig(max_new_tokens=12, seed=3, **common)),
    ]
    records = []
    with Engine(lm, max_batch_size=2, max_length=128, chunk_size=4) as engine:
        engine.warm_up(background=True)
        assert engine.compiling and engine.stats["compiling"]
        handles = [engine.submit(p, c) for p, c in requests]
        records += [
            (handle.result(TIMEOUT), request)
            for handle, request in zip(handles, requests)
        ]
        assert engine.compiling and torch.get_num_threads() == 1
        release.set()
        deadline = time.monotonic() + TIMEOUT
        while engine.compiling:
            assert time.monotonic() < deadline
            records.append((engine.submit(*requests[1]).result(TIMEOUT), requests[1]))
        assert torch.get_num_threads() == threads and traces() == 1
        del compiled_calls[:]
        records += [(engine.submit(p, c).result(TIMEOUT), (p, c)) for p, c in requests]
        assert compiled_calls and traces() == 1 and engine.compilations == 0
    for record, (prompt, config) in records:
        assert_same(record, alone(lm, prompt, config))


STRUCTURED = [
    {
        "type": "json_schema",
        "json_schema": {
            "name": "count",
            "schema": {
                "type": "object",
                "required": ["n"],
                "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
            },
        },
    },
    {"choice": ["yes", "no", "not sure"]},
    {"regex": "[a-z]{2,5}( [a-z]{2,5}){1,3}\\."},
    {"json": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
    {"type": "json_object"},
]


@ON_TORCH_ONLY
def test_structured_requests_equal_each_request_alone(lm):
    # Requests with different constraints (and none) arrive while others
    # run: the tables are packed anew for each new automaton and the
    # running slots' states renumbered; every request is as if alone.
    rng = np.random.default_rng(3)
    requests = []
    for i in range(14):
        options = dict(
            max_new_tokens=int(rng.integers(8, 40)),
            seed=i,
            output_log_probs=True,
            top_logprobs=2,
        )
        if i % 3:
            options.update(do_sample=True, temperature=float(rng.choice([0.7, 1.0])))
        if i % 7 != 6:
            options["response_format"] = STRUCTURED[i % len(STRUCTURED)]
        requests.append((PROMPTS[i % len(PROMPTS)], GenerationConfig(**options)))
    with Engine(lm, max_batch_size=4, max_length=64, chunk_size=2) as engine:
        handles = []
        for prompt, config in requests:
            handles.append(engine.submit(prompt, config))
            time.sleep(0.01)
        records = [handle.result(TIMEOUT) for handle in handles]
        for (prompt, config), record in zip(requests, records):
            assert_same(record, alone(lm, prompt, config))
        assert sum(r.finish_reasons == ["stop"] for r in records) >= 8
        # Another schema whose tables fall in a bucket already compiled.
        engine.submit("The", response_format=STRUCTURED[1], max_new_tokens=8).result()
        before = engine.compilations
        other = {"choice": ["up", "down", "left"]}
        record = engine.submit("The", response_format=other, max_new_tokens=8)
        assert record.result(TIMEOUT).text[0] in ("up", "down", "left")
        assert engine.compilations == before


@pytest.mark.only_backend("jax", "torch")
def test_constraints_beyond_the_tables_fail_alone(lm):
    # 167 and 149 transitions: each fits in 256 alone, not both together.
    words = {"regex": "[a-z]{2,4}"}
    numbers = {"regex": "[0-9a-f]{4,8}"}
    with Engine(
        lm, max_batch_size=4, max_length=64, constraint_transitions=256
    ) as engine:
        with pytest.raises(ValueError, match="hold .* 256 transitions"):
            engine.submit(
                "The", response_format={"regex": "[a-z]{1,30}"}, max_new_tokens=4
            )
        # Both wait while the step thread is held: one admission takes both.
        with engine._condition:
            first = engine.submit("The", response_format=words, max_new_tokens=9)
            second = engine.submit("A class", response_format=numbers, max_new_tokens=9)
        with pytest.raises(ValueError, match="transitions"):
            second.result(TIMEOUT)
        assert re.fullmatch("[a-z]{2,4}", first.result(TIMEOUT).text[0])
        # The engine goes on serving.
        third = engine.submit("The", response_format=numbers, max_new_tokens=9)
        assert third.result(TIMEOUT).finish_reasons == ["stop"]


def test_a_full_queue_is_refused():
    lm = tiny_text_lm(max_sequence_length=128)
    with Engine(lm, max_batch_size=1, max_length=128, max_queue=1) as engine:
        long = engine.submit(
            "The", max_new_tokens=100, stop_token_ids=[], temperature=0
        )
        next(iter(long))  # it holds the only slot
        waiting = engine.submit("A class", max_new_tokens=2, temperature=0)
        with pytest.raises(EngineFull, match="max_queue"):
            engine.submit("The while", max_new_tokens=2)
        long.cancel()
        assert waiting.result(TIMEOUT).finish_reasons == ["length"]


def test_close_ends_requests_in_flight_with_a_clear_error():
    lm = tiny_text_lm(max_sequence_length=128)
    engine = Engine(lm, max_batch_size=1, max_length=128)
    running = engine.submit("The", max_new_tokens=120, stop_token_ids=[], temperature=0)
    waiting = engine.submit("A class", max_new_tokens=5)
    next(iter(running))
    engine.close()
    for handle in (running, waiting):
        with pytest.raises(EngineClosed):
            handle.result(TIMEOUT)
    with pytest.raises(EngineClosed):
        engine.submit("x")


@pytest.mark.parametrize(
    "options, error, match",
    [
        (dict(num_beams=2), ValueError, "num_beams"),
        (dict(penalty_alpha=0.5), ValueError, "penalty_alpha"),
        (dict(prompt_lookup_ngram=2), ValueError, "prompt_lookup_ngram"),
        (dict(logit_bias={i: 1.0 for i in range(5000)}), ValueError, "4096"),
        (dict(max_new_tokens=100), ValueError, "max_length"),
        (dict(num_return_sequences=9), ValueError, "slots"),
        (dict(top_logprobs=21), ValueError, "top_logprobs"),
        (dict(temprature=0.5), TypeError, "temprature"),
        (dict(max_new_tokens=None), ValueError, "max_new_tokens"),
        (dict(response_format={"regex": "("}), ValueError, "regular expression"),
        (
            dict(response_format={"choice": ["a"]}, stop_token_ids=[]),
            ValueError,
            "stop token",
        ),
        (dict(response_format=[{"choice": ["a"]}] * 2), ValueError, "one prompt"),
    ],
)
def test_bad_requests_are_refused_at_submit(engine, options, error, match):
    with pytest.raises(error, match=match):
        engine.submit("The", **{"max_new_tokens": 2, **options})


# One request per option the engine runs (greedy and seeded sampling in
# turn), each beside others with different settings.
OPTION_TABLE = [
    dict(typical_p=0.7),
    dict(no_repeat_ngram_size=2),
    dict(min_length=14, eos_token_id=[203, 160]),
    dict(forced_eos_token_id=105, max_new_tokens=6),
    dict(bad_words_ids=[[203, 203], [160]]),
    dict(suppress_tokens=[61, 203]),
    dict(logit_bias={(203, 203): 4.0, 160: -100.0, 105: 2.5}),
    dict(output_scores=True, output_logits=True),
    dict(output_hidden_states=True, top_logprobs=4),
    dict(repetition_penalty=1.6, frequency_penalty=0.8, presence_penalty=-0.5),
    dict(min_new_tokens=6, eos_token_id=[203]),
    dict(top_k=3, top_p=0.8, min_p=0.05, temperature=0.6),
    dict(response_format={"choice": ["yes", "no", "not sure"]}),
    dict(stop_strings=["e"], stop_sequences=[[160, 105]]),
    dict(temperature=1.7, top_k=0, top_p=0.5),
    dict(top_n_sigma=1.0, temperature=1.3),
    dict(max_length=30),
]


@ON_TORCH_ONLY
def test_every_option_equals_generate_alone(lm):
    requests = []
    for i, options in enumerate(OPTION_TABLE):
        base = dict(output_log_probs=True, seed=i, do_sample=bool(i % 2))
        if "max_length" not in options:
            base["max_new_tokens"] = 10
        options = {**base, **options}
        if not options["do_sample"]:
            for name in ("top_k", "top_p", "min_p", "typical_p", "temperature"):
                options.pop(name, None)
        requests.append((PROMPTS[i % len(PROMPTS)], options))
    with Engine(
        lm, max_batch_size=8, max_length=64, chunk_size=3, top_logprobs=4
    ) as engine:
        handles = []
        for prompt, options in requests:
            handles.append(engine.submit(prompt, **options))
            time.sleep(0.003 * (len(handles) % 3))
        records = [handle.result(TIMEOUT) for handle in handles]
    for (prompt, options), record in zip(requests, records):
        expected = lm.generate(prompt, return_dict=True, **options)
        assert record.token_ids == expected.token_ids, options
        assert record.text == expected.text
        assert record.finish_reasons == expected.finish_reasons
        for name in ("log_probs", "scores", "logits", "hidden_states", "top_log_probs"):
            theirs = getattr(expected, name)
            if theirs is not None:
                for ours_row, theirs_row in zip(getattr(record, name), theirs):
                    np.testing.assert_allclose(
                        ours_row, theirs_row, atol=1e-5, rtol=1e-5
                    )
