"""A bounded soak of the server: 520 varied requests from four clients
(sampling options, stop strings, `n`, logprobs, structured output with new
constraints throughout, streams cancelled mid-way, bad requests), while a
fifth polls `/health`. Every status is the expected one, nothing compiles
after warm-up, memory stays flat and `/health` keeps answering."""

import random
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from keras_gen.serving import create_app  # noqa: E402
from tests.serving.openai_app_test import MODEL  # noqa: E402
from tests.serving.openai_app_test import running  # noqa: E402
from tests.text_models import tiny_text_lm  # noqa: E402

REQUESTS = 520
CLIENTS = 4
WORDS = ["alpha", "beta", "gamma", "delta", "north", "south", "east", "west"]


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


def body(rng):
    """A random request and the status it must get."""
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 16)))
    fields = {"model": MODEL, "prompt": prompt, "max_tokens": rng.randint(1, 24)}
    kind = rng.choice(
        [
            "greedy",
            "sample",
            "stop",
            "n",
            "logprobs",
            "regex",
            "choice",
            "json_object",
            "json_schema",
            "penalties",
            "stream",
            "cancel",
            "bad",
        ]
    )
    if kind == "greedy":
        fields["temperature"] = 0
    elif kind == "sample":
        fields.update(
            temperature=rng.uniform(0.2, 1.5),
            top_p=rng.uniform(0.1, 1.0),
            top_k=rng.randint(0, 50),
            seed=rng.randint(0, 10**6),
        )
    elif kind == "stop":
        fields["stop"] = rng.sample(WORDS + ["e", "a ", "\n"], rng.randint(1, 4))
    elif kind == "n":
        fields.update(n=rng.randint(2, 3), temperature=0.8, seed=rng.randint(0, 99))
    elif kind == "logprobs":
        fields["logprobs"] = rng.randint(0, 5)
    elif kind == "regex":
        fields["guided_regex"] = f"[a-z]{{1,{rng.randint(2, 12)}}}"
    elif kind == "choice":  # a new constraint, mostly: tables fill and evict
        fields["guided_choice"] = rng.sample(WORDS, 3) + [f"w{rng.randint(0, 10**6)}"]
    elif kind == "json_object":
        fields.update(response_format={"type": "json_object"}, max_tokens=24)
    elif kind == "json_schema":
        schema = {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0, "maximum": rng.randint(1, 10**6)}
            },
            "required": ["n"],
        }
        fields.update(
            response_format={"type": "json_schema", "json_schema": {"schema": schema}}
        )
    elif kind == "penalties":
        fields.update(
            presence_penalty=rng.uniform(-2, 2),
            frequency_penalty=rng.uniform(-2, 2),
            repetition_penalty=rng.uniform(0.5, 2),
            no_repeat_ngram_size=rng.randint(1, 4),
        )
    elif kind in ("stream", "cancel"):
        fields["stream"] = True
    elif kind == "bad":
        fields[rng.choice(["top_k", "n", "max_tokens"])] = 10**12
    return kind, fields


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_the_server_soaks_varied_requests_with_flat_memory_and_no_compiles():
    lm = tiny_text_lm(max_sequence_length=128)
    app = create_app(
        lm, model_name=MODEL, max_batch_size=4, max_length=128, warm_up=True
    )
    with running(app, startup_seconds=300) as client:
        engine = app.state.engine
        # One of each kind first: the tables and caches every kind keeps
        # exist before the measurement starts.
        for kind_seed in range(60):
            kind, fields = body(random.Random(kind_seed))
            if kind != "cancel":
                client.post("/v1/completions", json=fields)
        compiled, memory = engine.compilations, rss_mb()
        statuses, failures, health = [], [], []
        stop = threading.Event()

        def poll_health():
            while not stop.is_set():
                began = time.perf_counter()
                response = client.get("/health")
                health.append(time.perf_counter() - began)
                if response.status_code != 200:
                    failures.append(f"/health: {response.status_code}")
                time.sleep(0.05)

        def run(seed):
            rng = random.Random(seed)
            for _ in range(REQUESTS // CLIENTS):
                kind, fields = body(rng)
                try:
                    if kind == "cancel":  # read the first chunk, then leave
                        with client.stream("POST", "/v1/completions", json=fields) as r:
                            next(r.iter_lines())
                            statuses.append((kind, r.status_code))
                        continue
                    response = client.post("/v1/completions", json=fields)
                    statuses.append((kind, response.status_code))
                    if response.status_code != (400 if kind == "bad" else 200):
                        failures.append(f"{kind}: {response.text}"[:300])
                    if (
                        kind != "bad"
                        and response.status_code == 200
                        and kind != "stream"
                    ):
                        choices = response.json()["choices"]
                        assert len(choices) == fields.get("n", 1)
                        if kind == "choice":  # whole, or cut by max_tokens
                            for c in choices:
                                assert c["text"] in fields["guided_choice"] or (
                                    c["finish_reason"] == "length"
                                ), c
                except Exception as error:  # every one is a failure here
                    failures.append(f"{kind}: {error!r}"[:300])

        poller = threading.Thread(target=poll_health)
        poller.start()
        began = time.monotonic()
        clients = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(600)
        took = time.monotonic() - began
        stop.set()
        poller.join(10)
        deadline = time.monotonic() + 30  # cancelled streams end
        while engine.stats["running"] and time.monotonic() < deadline:
            time.sleep(0.1)

        assert not failures, failures[:10]
        assert len(statuses) == REQUESTS
        for kind, status in statuses:
            assert status == (400 if kind == "bad" else 200), (kind, status)
        assert engine.stats["running"] == 0 and engine.stats["waiting"] == 0
        assert engine.compilations == compiled
        growth = rss_mb() - memory
        p99 = float(np.percentile(health, 99))
        print(
            f"\nsoak: {REQUESTS} requests in {took:.0f} s, RSS {memory:.0f} -> "
            f"{memory + growth:.0f} MB, compilations {compiled} -> "
            f"{engine.compilations}, /health p99 {p99 * 1000:.0f} ms "
            f"({len(health)} polls)"
        )
        assert growth < 100, growth
        # A compile or a blocked event loop stalls `/health` for seconds.
        assert p99 < 2.0, p99
