"""Hostile requests: each gets a 4xx naming the field, and no request's
preparation stalls the others (or `/health`)."""

import threading
import time

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from keras_gen.serving import create_app  # noqa: E402
from keras_gen.serving import openai_app  # noqa: E402
from tests.serving.openai_app_test import MODEL  # noqa: E402
from tests.serving.openai_app_test import running  # noqa: E402
from tests.text_models import tiny_text_lm  # noqa: E402

# The HTTP layer is the same on every backend.
pytestmark = pytest.mark.only_backend("jax")


@pytest.fixture(scope="module")
def lm():
    return tiny_text_lm()


@pytest.fixture(scope="module")
def server(lm):
    with running(create_app(lm, model_name=MODEL, max_batch_size=4)) as client:
        yield client


BAD = [
    ({"top_k": 10**12}, "top_k"),
    ({"top_k": -2}, "top_k"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": 1e39}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"n": 10**9}, "n"),
    ({"n": 0}, "n"),
    ({"max_tokens": 10**9}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"logprobs": 10**6}, "logprobs"),
    ({"stop": ["x"] * 100}, "stop"),
    ({"stop": 5}, "stop"),
    ({"seed": "x"}, "seed"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"no_repeat_ngram_size": 1000}, "no_repeat_ngram_size"),
    ({"bad_words_ids": [[1] * 1000]}, "bad_words_ids"),
    ({"logit_bias": {"1": 1e9}}, "logit_bias"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"frequency_penalty": 1e9}, "frequency_penalty"),
    ({"guided_regex": "a{100000}"}, "too large"),
    ({"guided_regex": "(unclosed"}, "regular expression"),
    ({"guided_json": {"type": "array", "minItems": 10**6}}, "too large"),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"schema": {"type": "string", "minLength": 10**6}},
            }
        },
        "too large",
    ),
    ({"response_format": {"type": "nonsense"}}, "response_format"),
    ({"guided_choice": []}, "choice"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": [[-1, 5]]}, "prompt"),
    ({"prompt": "x " * 5000}, "prompt"),
    ({"processors": {"nope": {}}}, "nope"),
    ({"vllm_xargs": {"nope": 1}}, "nope"),
    ({"output_scores": "yes"}, "output_scores"),
    ({"stream": "yes"}, "stream"),
    ({"use_beam_search": True}, "beam"),
]


@pytest.mark.parametrize("fields, named", BAD, ids=[repr(b[0])[:50] for b in BAD])
def test_a_hostile_request_gets_a_4xx_naming_what_is_wrong(server, fields, named):
    body = {"model": MODEL, "prompt": "The", "max_tokens": 4, **fields}
    response = server.post("/v1/completions", json=body)
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert named in (error["message"] + str(error["param"])), error


def test_health_answers_while_a_request_is_prepared(lm, monkeypatch):
    """A slow preparation (a large constraint, say) runs off the event loop:
    `/health` and other requests answer meanwhile."""
    real = openai_app.CompletionRequest

    def slow(body, kind, served):
        if body.get("prompt") == "slow":
            time.sleep(3)
        return real(body, kind, served)

    monkeypatch.setattr(openai_app, "CompletionRequest", slow)
    app = create_app(lm, model_name=MODEL, max_batch_size=4)
    with running(app) as client:
        body = {"model": MODEL, "max_tokens": 2, "temperature": 0}
        client.post("/v1/completions", json={**body, "prompt": "warm"})
        answers = {}
        thread = threading.Thread(
            target=lambda: answers.update(
                slow=client.post("/v1/completions", json={**body, "prompt": "slow"})
            )
        )
        thread.start()
        time.sleep(0.3)
        latencies = []
        while thread.is_alive() and len(latencies) < 40:
            began = time.perf_counter()
            assert client.get("/health").status_code == 200
            latencies.append(time.perf_counter() - began)
            time.sleep(0.05)
        other = client.post("/v1/completions", json={**body, "prompt": "other"})
        thread.join(60)
    assert len(latencies) >= 10 and max(latencies) < 0.1, latencies
    assert other.status_code == 200 and answers["slow"].status_code == 200


def test_a_preparation_past_its_time_is_a_503_and_leaves_nothing_running(
    lm, monkeypatch
):
    real = openai_app.CompletionRequest

    def slow(body, kind, served):
        time.sleep(1.5)
        return real(body, kind, served)

    monkeypatch.setattr(openai_app, "CompletionRequest", slow)
    monkeypatch.setattr(openai_app, "PREPARE_TIMEOUT", 0.5)
    app = create_app(lm, model_name=MODEL, max_batch_size=4)
    with running(app) as client:
        body = {"model": MODEL, "prompt": "x", "max_tokens": 50, "temperature": 0}
        response = client.post("/v1/completions", json=body)
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "timeout"
        engine = app.state.engine
        deadline = time.monotonic() + 30
        while engine.running or engine.waiting:  # cancelled once submitted
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.get("/health").status_code == 200
