"""The HTTP server, end to end: a real uvicorn on 127.0.0.1 and httpx."""

import contextlib
import json
import os
import socket
import threading
import time

import keras
import numpy as np
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from keras_gen.processors import LogitsProcessor  # noqa: E402
from keras_gen.serving import Engine  # noqa: E402
from keras_gen.serving import create_app  # noqa: E402
from tests.text_models import PROMPTS  # noqa: E402
from tests.text_models import tiny_text_lm  # noqa: E402

# The engine's programs are those of tests/serving/engine_test.py, which runs
# on every backend; the HTTP layer above them is the same on each.
pytestmark = pytest.mark.only_backend("jax")

MODEL = "tiny"
TIMEOUT = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(app, startup_seconds=30):
    """`app` on uvicorn at a free loopback port; a client to it."""
    port = free_port()
    uvicorn_server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_seconds
    while not uvicorn_server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT)
    try:
        yield client
    finally:
        client.close()
        uvicorn_server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def server():
    lm = tiny_text_lm()
    app = create_app(lm, model_name=MODEL, max_batch_size=8)

    @app.get("/test/fail")
    async def fail():  # an unexpected error inside a handler
        raise RuntimeError("boom")

    with running(app) as client:
        yield client, lm, app.state.engine


def complete(client, prompt, **fields):
    body = {"model": MODEL, "prompt": prompt, "temperature": 0, **fields}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def events(response):
    """The decoded `data:` payloads of a server-sent event stream."""
    payloads = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def expected(lm, prompt, max_new_tokens, **options):
    record = lm.generate(
        prompt, max_new_tokens=max_new_tokens, return_dict=True, **options
    )
    return record.text[0], record.token_ids[0], record.finish_reasons[0]


def test_health_and_models(server):
    client, lm, _ = server
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == MODEL
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == MODEL
    assert models["data"][0]["context_length"] == lm.backbone.max_sequence_length


def test_completion_equals_generate(server):
    client, lm, _ = server
    answer = complete(client, "The for statement", max_tokens=12)
    text, tokens, reason = expected(lm, "The for statement", 12)
    choice = answer["choices"][0]
    assert answer["object"] == "text_completion" and answer["model"] == MODEL
    assert choice["text"] == text
    assert choice["finish_reason"] == reason
    assert answer["usage"]["completion_tokens"] == len(tokens)
    assert answer["usage"]["prompt_tokens"] == len(
        lm.tokenizer.encode("The for statement")
    )


def test_streamed_completion_joins_to_the_plain_one(server):
    client, lm, _ = server
    body = {"model": MODEL, "prompt": "A class", "max_tokens": 14, "temperature": 0}
    with client.stream(
        "POST", "/v1/completions", json={**body, "stream": True}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = events(response)
    assert chunks[-1] == "[DONE]"
    chunks = chunks[:-1]
    assert len(chunks) > 1, "one chunk per token group, not one at the end"
    assert all(c["object"] == "text_completion" for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert text == complete(client, "A class", max_tokens=14)["choices"][0]["text"]
    assert reasons[-1] in ("stop", "length") and set(reasons[:-1]) == {None}


def test_chat_completion_uses_the_template(server):
    client, lm, _ = server
    messages = [{"role": "user", "content": "What is a class?"}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 10, "temperature": 0}
    answer = client.post("/v1/chat/completions", json=body).json()
    text, _, reason = expected(lm, messages, 10)  # the same conversation
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": text}
    assert answer["choices"][0]["finish_reason"] == reason

    with client.stream(
        "POST", "/v1/chat/completions", json={**body, "stream": True}
    ) as r:
        chunks = events(r)
    assert chunks[-1] == "[DONE]"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks[:-1])
    streamed = "".join(
        c["choices"][0]["delta"].get("content", "") for c in chunks[:-1] if c["choices"]
    )
    assert streamed == text


def test_tokenize_and_detokenize(server):
    client, lm, _ = server
    messages = [{"role": "user", "content": "What is a class?"}]
    answer = client.post("/tokenize", json={"prompt": "The for statement"}).json()
    ids = lm.tokenizer.encode("The for statement")
    assert answer == {
        "count": len(ids),
        "max_model_len": lm.backbone.max_sequence_length,
        "tokens": ids,
    }
    chat = client.post(
        "/tokenize",
        json={"model": MODEL, "messages": messages, "return_token_strs": True},
    ).json()
    assert chat["tokens"] == lm.tokenizer.apply_chat_template(messages)
    assert chat["token_strs"] == [lm.tokenizer.id_to_token(t) for t in chat["tokens"]]
    back = client.post("/detokenize", json={"tokens": ids}).json()
    assert back == {"prompt": "The for statement"}
    for path, body, param in (
        ("/tokenize", {}, "prompt"),
        ("/tokenize", {"messages": [{"content": "no role"}]}, "messages[0]"),
        (
            "/tokenize",
            {"prompt": "x", "add_special_tokens": "yes"},
            "add_special_tokens",
        ),
        ("/detokenize", {"tokens": [1, -1]}, "tokens"),
        ("/detokenize", {"tokens": "1 2"}, "tokens"),
        ("/detokenize", {}, "tokens"),
    ):
        response = client.post(path, json=body)
        assert response.status_code == 400, (path, body)
        assert response.json()["error"]["param"] == param
    response = client.post("/tokenize", json={"model": "other", "prompt": "x"})
    assert response.status_code == 404


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "n": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["name", "n"],
}


def test_structured_output_fields(server):
    client, lm, _ = server
    fields = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True},
        },
        "max_tokens": 60,
        "temperature": 0.9,
        "seed": 1,
    }
    messages = [{"role": "user", "content": "A thing?"}]
    body = {"model": MODEL, "messages": messages, **fields}
    answer = client.post("/v1/chat/completions", json=body).json()
    content = answer["choices"][0]["message"]["content"]
    assert json.loads(content)["n"] in range(1, 10)
    text, _, reason = expected(
        lm,
        messages,
        60,
        do_sample=True,
        temperature=0.9,
        seed=1,
        response_format=fields["response_format"],
    )
    assert (content, answer["choices"][0]["finish_reason"]) == (text, reason)
    # vLLM's forms, the current and the older.
    for extra, check in (
        ({"guided_choice": ["yes", "no"]}, lambda t: t in ("yes", "no")),
        ({"structured_outputs": {"regex": "[0-9]{3}"}}, lambda t: t.isdigit()),
        ({"guided_json": json.dumps(SCHEMA)}, lambda t: "n" in json.loads(t)),
        (
            {"response_format": {"type": "json_object"}},
            lambda t: isinstance(json.loads(t), dict),
        ),
    ):
        answer = complete(client, "The", max_tokens=60, **extra)
        assert check(answer["choices"][0]["text"]), (extra, answer)
        assert answer["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "objec"}},
                }
            },
            "response_format",
        ),
        ({"response_format": "json"}, "response_format"),
        ({"guided_regex": "("}, "guided_regex"),
        ({"guided_grammar": "root ::= 'a'"}, "guided_grammar"),
        ({"guided_choice": ["a"], "guided_regex": "b"}, "guided_regex"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs"),
    ],
    ids=[
        "no-schema",
        "bad-schema",
        "not-object",
        "bad-regex",
        "grammar",
        "two",
        "empty-choice",
    ],
)
def test_bad_structured_outputs_get_400(server, fields, param):
    client, _, _ = server
    body = {"model": MODEL, "prompt": "x", "max_tokens": 4, **fields}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param, error


def streamed_text(client, body):
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        chunks = events(r)[:-1]
    return "".join(c["choices"][0]["text"] for c in chunks if c["choices"])


def test_line_breaks_of_unicode_stay_inside_an_event(server):
    # U+2028, U+2029 and U+0085 end a line for `str.splitlines` (and
    # httpx's `iter_lines`): the server escapes them in its JSON.
    client, _, _ = server
    text = "a\u2028b\u2029c\x85d"
    body = {"model": MODEL, "prompt": "The", "guided_choice": [text]}
    assert streamed_text(client, body) == text
    assert complete(client, "The", guided_choice=[text])["choices"][0]["text"] == text


def test_concurrent_mixed_requests_equal_their_single_answers(server):
    client, lm, engine = server
    requests = []
    for i in range(12):
        fields = {"max_tokens": 6 + i % 5}
        if i % 3:
            fields.update(temperature=0.6 + 0.1 * (i % 4), top_k=5 + i, seed=i)
        else:
            fields.update(temperature=0)
        if i % 4 == 1:
            fields.update(presence_penalty=0.5, stop=["\n\n"])
        requests.append(
            ({"model": MODEL, "prompt": PROMPTS[i % len(PROMPTS)], **fields}, i % 2)
        )
    singles = []
    for body, streamed in requests:
        answer = client.post("/v1/completions", json=body).json()
        singles.append(answer["choices"][0]["text"])
    tokens_before = metric(client, "keras_gen_generated_tokens_total")
    answers = [None] * len(requests)

    def ask(i):
        body, streamed = requests[i]
        with httpx.Client(base_url=client.base_url, timeout=TIMEOUT) as own:
            if streamed:
                answers[i] = streamed_text(own, body)
            else:
                response = own.post("/v1/completions", json=body)
                answers[i] = response.json()["choices"][0]["text"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert answers == singles
    assert metric(client, "keras_gen_generated_tokens_total") > tokens_before


def test_n_logprobs_and_seed(server):
    client, lm, _ = server
    answer = complete(client, "The", max_tokens=5, n=2, logprobs=2)
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    logprobs = answer["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == 5
    assert all(len(top) <= 2 for top in logprobs["top_logprobs"])
    assert all(lp <= 0 for lp in logprobs["token_logprobs"])
    sampled = dict(temperature=0.9, top_k=20, seed=7, max_tokens=6)
    first = complete(client, "The", **sampled)["choices"][0]["text"]
    assert complete(client, "The", **sampled)["choices"][0]["text"] == first


def metrics(client):
    """`/metrics`, parsed by prometheus_client: sample name and labels to value."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def metric(client, name, **labels):
    return metrics(client).get((name, tuple(sorted(labels.items()))), 0.0)


def wait_until_idle(client, timeout=60):
    deadline = time.monotonic() + timeout
    while client.get("/health").json()["running"]:
        assert time.monotonic() < deadline, "a request kept running"
        time.sleep(0.05)
    return client.get("/health").json()


@pytest.fixture
def slow_decoding(monkeypatch):
    """Each decode program call takes 20 ms more: long generations stay
    long (the engine counts the time as its steps')."""
    program = Engine._program

    def slow(self, kind, bucket=None):
        run = program(self, kind, bucket)
        if kind != "decode":
            return run

        def call(*args):
            time.sleep(0.02)
            return run(*args)

        return call

    monkeypatch.setattr(Engine, "_program", slow)


def test_metrics_count_requests_tokens_and_latency(server):
    client, lm, _ = server
    body = {
        "model": MODEL,
        "prompt": "The for statement",
        "max_tokens": 7,
        "temperature": 0,
        "ignore_eos": True,
    }
    client.post("/v1/completions", json=body)  # its programs exist, in any order
    wait_until_idle(client)
    before = metrics(client)
    names = {name for name, _ in before}
    for name in (
        "keras_gen_prompt_tokens_total",
        "keras_gen_generated_tokens_total",
        "keras_gen_running_requests",
        "keras_gen_waiting_requests",
        "keras_gen_program_compilations_total",
        "keras_gen_time_to_first_token_seconds_count",
        "keras_gen_inter_token_latency_seconds_count",
    ):
        assert name in names, name
    answers = [client.post("/v1/completions", json=body).json() for _ in range(2)]
    after = metrics(client)

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert moved("keras_gen_requests_total", finish_reason="length") == 2
    assert moved("keras_gen_generated_tokens_total") == 14
    assert (
        moved("keras_gen_prompt_tokens_total")
        == 2 * answers[0]["usage"]["prompt_tokens"]
    )
    assert moved("keras_gen_time_to_first_token_seconds_count") == 2
    assert moved("keras_gen_inter_token_latency_seconds_count") == 12
    assert moved("keras_gen_program_compilations_total") == 0
    assert after[("keras_gen_running_requests", ())] == 0
    # A prompt sent again begins from its cached blocks, unless it opts out.
    body["prompt"] = "The for statement repeats its body. " * 4
    for cache_prompt in (True, True, False):
        before = metrics(client)
        client.post("/v1/completions", json={**body, "cache_prompt": cache_prompt})
        after = metrics(client)
    assert moved("keras_gen_prefix_cache_queries_total") == 0
    assert after[("keras_gen_prefix_cache_hits_total", ())] >= 16
    assert after[("keras_gen_prefix_cache_bytes", ())] > 0
    answer = client.post("/v1/completions", json={**body, "cache_prompt": "no"})
    assert answer.status_code == 400 and "cache_prompt" in answer.text


@pytest.mark.slow
def test_streams_cut_after_two_events_free_their_slots(server, slow_decoding):
    client, lm, _ = server
    wait_until_idle(client)
    cancelled = metric(client, "keras_gen_requests_total", finish_reason="cancelled")
    generated = metric(client, "keras_gen_generated_tokens_total")
    body = {
        "model": MODEL,
        "prompt": "The while",
        "max_tokens": 200,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }

    def cut():
        with httpx.Client(base_url=client.base_url, timeout=TIMEOUT) as own:
            with own.stream("POST", "/v1/completions", json=body) as response:
                lines = (
                    line for line in response.iter_lines() if line.startswith("data")
                )
                assert len([line for line, _ in zip(lines, range(2))]) == 2

    threads = [threading.Thread(target=cut) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    wait_until_idle(client)
    assert metric(client, "keras_gen_running_requests") == 0
    assert metric(client, "keras_gen_waiting_requests") == 0
    assert (
        metric(client, "keras_gen_requests_total", finish_reason="cancelled")
        == cancelled + 20
    )
    # 20 x 200 tokens would be 4,000; each stopped within a few chunks.
    assert metric(client, "keras_gen_generated_tokens_total") - generated < 1000
    assert complete(client, "A class", max_tokens=4)["choices"][0]["finish_reason"]


def test_a_full_queue_answers_429_and_never_hangs(slow_decoding):
    # One slot, one place in the queue, one step per chunk (each delivery
    # takes 20 ms): the long request holds the slot for 5 s.
    app = create_app(
        tiny_text_lm(), model_name=MODEL, max_batch_size=1, max_queue=1, chunk_size=1
    )
    long_body = {
        "model": MODEL,
        "prompt": "The",
        "max_tokens": 250,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }

    def wait_in_the_queue():
        with httpx.Client(base_url=client.base_url, timeout=TIMEOUT) as own:
            complete(own, "A", max_tokens=2)

    with running(app) as client:
        with client.stream("POST", "/v1/completions", json=long_body) as holding:
            # Keep the iterator: dropping it would close the stream.
            lines = holding.iter_lines()
            next(lines)  # it holds the only slot
            waiting = threading.Thread(target=wait_in_the_queue)
            waiting.start()
            deadline = time.monotonic() + TIMEOUT
            while client.get("/health").json()["waiting"] < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            response = client.post(
                "/v1/completions", json={**long_body, "stream": False}
            )
            assert response.status_code == 429
            error = response.json()["error"]
            assert error["type"] == "rate_limit_error"
            assert "max_queue" in error["message"]
        # The long stream closed: its slot serves the waiting request.
        waiting.join(TIMEOUT)
        assert not waiting.is_alive()


@pytest.mark.slow
def test_a_short_request_does_not_wait_for_a_long_one(server, slow_decoding):
    client, _, _ = server
    wait_until_idle(client)
    long_body = {
        "model": MODEL,
        "prompt": "The while",
        "max_tokens": 240,
        "temperature": 0,
        "ignore_eos": True,
    }
    done = {}

    def ask_long():
        with httpx.Client(base_url=client.base_url, timeout=TIMEOUT) as own:
            own.post("/v1/completions", json=long_body)
            done["long"] = time.monotonic()

    thread = threading.Thread(target=ask_long)
    thread.start()
    time.sleep(0.5)
    complete(client, "A class", max_tokens=4)
    done["short"] = time.monotonic()
    thread.join(TIMEOUT)
    assert done["short"] < done["long"]


@pytest.mark.parametrize(
    "body, status, param, code",
    [
        (b"{not json", 400, None, "invalid_json"),
        (b"[1, 2]", 400, None, None),
        (json.dumps({"model": MODEL}).encode(), 400, "prompt", None),
        (json.dumps({"prompt": "x"}).encode(), 400, "model", None),
        (
            json.dumps({"model": MODEL, "prompt": "x", "max_tokens": "ten"}).encode(),
            400,
            "max_tokens",
            "invalid_type",
        ),
        (
            json.dumps({"model": MODEL, "prompt": "x", "temperature": -1}).encode(),
            400,
            "temperature",
            "invalid_value",
        ),
        (
            json.dumps({"model": MODEL, "prompt": 5}).encode(),
            400,
            "prompt",
            "invalid_type",
        ),
        (
            json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 10_000}).encode(),
            400,
            "max_tokens",
            "context_length_exceeded",
        ),
        (
            json.dumps({"model": "gpt-4", "prompt": "x"}).encode(),
            404,
            "model",
            "model_not_found",
        ),
        (
            json.dumps({"model": MODEL, "prompt": "x" * (2 << 20)}).encode(),
            413,
            None,
            "request_too_large",
        ),
    ],
    ids=[
        "malformed-json",
        "not-an-object",
        "no-prompt",
        "no-model",
        "wrong-type",
        "out-of-range",
        "prompt-type",
        "beyond-context",
        "unknown-model",
        "oversized",
    ],
)
def test_bad_requests_get_openai_errors(server, body, status, param, code):
    client, _, _ = server
    response = client.post(
        "/v1/completions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    assert error["param"] == param and error["code"] == code
    assert client.get("/health").json()["status"] == "ok"


def test_bad_chat_requests_and_routes(server):
    client, _, _ = server
    for messages in (
        None,
        [],
        [{"role": "wizard", "content": "hi"}],
        [{"role": "user"}],
    ):
        body = {"model": MODEL, "messages": messages}
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 400
        assert response.json()["error"]["param"].startswith("messages")
    response = client.get("/v1/nothing")
    assert response.status_code == 404 and "error" in response.json()
    assert client.get("/v1/completions").status_code == 405


def _rss_mb():
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _strict_json(text):
    def refuse(constant):
        raise AssertionError(f"{constant} in a JSON response")

    return json.loads(text, parse_constant=refuse)


VARIED = {
    "temperature": [0, 0.3, 0.7, 1.0, 1.6],
    "top_k": [-1, 0, 1, 5, 40],
    "top_p": [0.3, 0.8, 1.0],
    "min_p": [0.0, 0.05, 0.3],
    "presence_penalty": [-1.0, 0.0, 0.5, 2.0],
    "frequency_penalty": [-0.5, 0.0, 1.0],
    "repetition_penalty": [1.0, 1.1, 1.5],
}


def test_varied_requests_compile_nothing_and_keep_memory_flat(server, compiles):
    client, _, _ = server
    wait_until_idle(client)
    rng = __import__("numpy").random.default_rng(0)
    same = {
        "prompt": "The for statement",
        "max_tokens": 12,
        "temperature": 0.7,
        "top_k": 5,
        "seed": 1,
    }

    def ask(**fields):
        complete(client, **{"max_tokens": 12, **fields})

    # Warm-up: a greedy and a sampled request per prompt compile the
    # programs of each shape bucket; settings never compile.
    for prompt in PROMPTS:
        ask(**{**same, "prompt": prompt})
        ask(prompt=prompt, temperature=0)
    start, rss = compiles(), _rss_mb()
    for i in range(100):
        fields = {
            name: values[rng.integers(len(values))]
            for name, values in VARIED.items()
            if rng.random() < 0.7
        }
        fields = {
            k: float(v) if isinstance(v, float) else int(v) for k, v in fields.items()
        }
        ask(prompt=PROMPTS[i % len(PROMPTS)], seed=i, **fields)
    # No timing here (speed lives in tools/benchmark_serving.py): the
    # compile count says that no request built a program.
    assert compiles() == start, "a request compiled a new program"
    assert _rss_mb() - rss < 100


def test_top_k_top_p_and_min_p_apply_together(server):
    client, lm, _ = server
    fields = dict(temperature=1.3, top_k=8, top_p=0.7, min_p=0.1, seed=7)
    for prompt in PROMPTS[:4]:
        answer = complete(client, prompt, max_tokens=12, **fields)
        text, _, _ = expected(lm, prompt, 12, **fields)
        assert answer["choices"][0]["text"] == text
    # Without the filters the same seed samples something else.
    loose = [
        complete(client, p, max_tokens=12, temperature=1.3, seed=7)["choices"][0][
            "text"
        ]
        for p in PROMPTS[:4]
    ]
    assert loose != [expected(lm, p, 12, **fields)[0] for p in PROMPTS[:4]]


def test_responses_never_hold_nan_or_infinity(server):
    from keras_gen.serving import openai_app

    assert _strict_json(
        openai_app._dumps({"a": [float("-inf"), float("nan"), float("inf"), 1.5]})
    ) == {"a": [-9999.0, None, 9999.0, 1.5]}
    client, _, _ = server
    body = {
        "model": MODEL,
        "prompt": "The",
        "max_tokens": 6,
        "logprobs": 5,
        "min_tokens": 6,
        "logit_bias": {"5": -100},
        "seed": 0,
    }
    _strict_json(client.post("/v1/completions", json=body).text)
    with client.stream(
        "POST", "/v1/completions", json={**body, "stream": True}
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                _strict_json(line[len("data: ") :])


def test_an_error_in_a_handler_is_a_500_on_a_connection_that_stays_open(server):
    client, _, _ = server
    host, port = client.base_url.host, client.base_url.port
    request = f"GET {{}} HTTP/1.1\r\nHost: {host}\r\n\r\n"
    with socket.create_connection((host, port), timeout=30) as sock:
        reader = sock.makefile("rb")

        def response():
            status = reader.readline().decode()
            headers = {}
            while line := reader.readline().decode().strip():
                key, value = line.split(":", 1)
                headers[key.lower()] = value.strip()
            return status, headers, reader.read(int(headers["content-length"]))

        sock.sendall(request.format("/test/fail").encode())
        status, headers, body = response()
        assert " 500 " in status and headers.get("connection") != "close"
        error = json.loads(body)["error"]
        assert error["type"] == "server_error" and "boom" in error["message"]
        sock.sendall(request.format("/health").encode())
        status, _, body = response()
        assert " 200 " in status and json.loads(body)["status"] == "ok"


def test_deeply_nested_json_is_a_400(server):
    client, _, _ = server
    body = b"[" * 100_000 + b"]" * 100_000
    response = client.post(
        "/v1/completions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


class Boost(LogitsProcessor):
    """A processor of the test's own: adds `amount` to token `token`.

    Both are tunable numbers: each request's own, in one compiled step."""

    def __init__(self, token=0, amount=0.0):
        self.token = token
        self.amount = amount

    def get_parameters(self):
        return {"token": int(self.token), "amount": float(self.amount)}

    def __call__(self, logits, prompt, index, mask):
        vocabulary = keras.ops.arange(keras.ops.shape(logits)[-1])[None, :]
        return logits + keras.ops.where(vocabulary == self.token, self.amount, 0.0)

    def get_config(self):
        return {"token": self.token, "amount": self.amount}


def test_a_processor_of_ones_own_is_selected_per_request():
    lm = tiny_text_lm()
    app = create_app(
        lm,
        model_name=MODEL,
        max_batch_size=4,
        max_length=64,
        chunk_size=3,
        logits_processors={"boost": Boost},
    )
    engine = app.state.engine
    engine.warm_up()
    compiled = engine.compilations
    bodies = [
        dict(
            prompt="The for statement",
            processors={"boost": {"token": 105, "amount": 9.0}},
        ),
        dict(prompt="A class", vllm_xargs={"boost.token": 203, "amount": 4.5}),
        dict(prompt="The while", seed=3, temperature=0.9),
        dict(
            prompt="The for statement",
            processors={"boost": {}},
            temperature=0.8,
            seed=5,
        ),
        dict(
            prompt="is used",
            vllm_xargs={"token": 160, "boost.amount": 30.0},
            top_k=4,
            seed=2,
        ),
    ] * 2
    with running(app) as client:
        answers = [None] * len(bodies)

        def ask(i):
            answers[i] = complete(client, **{"max_tokens": 8, **bodies[i]})

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(bodies))]
        for thread in threads:
            thread.start()
            time.sleep(0.01)
        for thread in threads:
            thread.join(TIMEOUT)
        for body, answer in zip(bodies, answers):
            arguments = dict(body.get("processors", {}).get("boost", {}))
            for key, value in body.get("vllm_xargs", {}).items():
                arguments[key.rpartition(".")[2]] = value
            options = {
                k: v for k, v in body.items() if k in ("seed", "top_k", "temperature")
            }
            if options.get("temperature", 0) > 0:
                options["do_sample"] = True
            chosen = (
                [Boost(**arguments)]
                if "processors" in body or "vllm_xargs" in body
                else []
            )
            record = lm.generate(
                body["prompt"],
                max_new_tokens=8,
                processors=chosen,
                return_dict=True,
                **options,
            )
            assert answer["choices"][0]["text"] == record.text[0]
            if arguments.get("amount", 0) > 8:  # the boost shows
                assert lm.tokenizer.decode([arguments["token"]]) in record.text[0]
        # Bad selections are 400s naming the field.
        for fields, param in (
            (dict(processors={"nope": {}}), "processors"),
            (dict(processors={"boost": {"colour": 1}}), None),
            (dict(vllm_xargs={"colour": 1}), "vllm_xargs"),
            (dict(processors={"boost": 3}), "processors"),
        ):
            response = client.post(
                "/v1/completions", json={"model": MODEL, "prompt": "The", **fields}
            )
            assert response.status_code == 400, response.text
            assert response.json()["error"]["param"] == param
    assert engine.compilations == compiled


def test_scores_and_logits_per_token_equal_generate(server, monkeypatch):
    client, lm, _ = server
    answer = complete(
        client,
        "The while",
        max_tokens=5,
        output_scores=True,
        output_logits=True,
        repetition_penalty=1.5,
    )
    record = lm.generate(
        "The while",
        max_new_tokens=5,
        output_scores=True,
        output_logits=True,
        repetition_penalty=1.5,
        do_sample=False,
        return_dict=True,
    )
    choice = answer["choices"][0]
    for name in ("scores", "logits"):
        theirs = np.where(np.isinf(record[name][0]), -9999.0, record[name][0])
        np.testing.assert_allclose(choice[name], theirs, atol=1e-5)
    assert "scores" not in complete(client, "The while", max_tokens=2)["choices"][0]
    # Streamed: each event carries its tokens' rows.
    body = {
        "model": MODEL,
        "prompt": "The while",
        "max_tokens": 5,
        "temperature": 0,
        "output_logits": True,
        "repetition_penalty": 1.5,
        "stream": True,
    }
    with client.stream("POST", "/v1/completions", json=body) as response:
        chunks = [c for c in events(response)[:-1] if c["choices"]]
    rows = [row for c in chunks for row in c["choices"][0]["logits"]]
    np.testing.assert_allclose(rows, record.logits[0], atol=1e-5)
    # Bounded before it is paid: n x tokens x vocabulary x outputs.
    from keras_gen.serving import completion_request

    vocabulary_size = lm.backbone.vocabulary_size
    monkeypatch.setattr(
        completion_request, "MAX_VOCABULARY_OUTPUTS", 20 * vocabulary_size
    )
    body = {
        "model": MODEL,
        "prompt": "The",
        "max_tokens": 5,
        "n": 2,
        "output_scores": True,
        "output_logits": True,
    }
    assert client.post("/v1/completions", json=body).status_code == 200
    response = client.post("/v1/completions", json={**body, "max_tokens": 6})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "output_scores"


def test_prompt_lookup_requests_speculate_with_the_servers_limit(server):
    # The module's server does not speculate: a 400 naming the field.
    client, _, _ = server
    response = client.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": "The", "prompt_lookup_ngram": 2},
    )
    assert response.status_code == 400, response.text
    assert "num-speculative-tokens" in response.json()["error"]["message"]
    lm = tiny_text_lm()
    app = create_app(lm, model_name=MODEL, max_batch_size=4, num_speculative_tokens=3)
    prompt = "The for statement is used. The for statement is used. The for"
    with running(app) as client:
        answer = complete(client, prompt, max_tokens=16, prompt_lookup_ngram=2)
        response = client.post(
            "/v1/completions",
            json={
                "model": MODEL,
                "prompt": "The",
                "prompt_lookup_ngram": 2,
                "num_speculative_tokens": 4,
            },
        )
        assert response.status_code == 400, response.text
        drafted = metric(client, "keras_gen_speculative_draft_tokens_total")
    assert answer["choices"][0]["text"] == expected(lm, prompt, 16)[0]
    assert drafted > 0
