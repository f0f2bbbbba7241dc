"""A thinking template's replies: `reasoning_content` apart from `content`."""

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from keras_gen.serving import create_app  # noqa: E402
from tests.models.causal_lm_chat_test import chat_lm  # noqa: E402
from tests.script_processor import Script  # noqa: E402
from tests.serving.openai_app_test import events  # noqa: E402
from tests.serving.openai_app_test import running  # noqa: E402

pytestmark = pytest.mark.only_backend("jax")

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]
THINKING = "<think>\nfirst, 2 + 2</think>\n\n"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    lm = chat_lm("qwen", tmp_path_factory.mktemp("qwen"))
    encode = lm.tokenizer.encode
    scripts = {
        "reply": Script(encode(THINKING + "It is 4.") + [lm.tokenizer.eos_token_id]),
        "thinking": Script(encode(THINKING)),
    }
    app = create_app(lm, model_name="qwen", max_batch_size=2, logits_processors=scripts)
    with running(app) as client:
        yield client


REPLY = {"processors": {"reply": {}}}


def ask(client, stream=False, **fields):
    body = {"model": "qwen", "messages": MESSAGES, "max_tokens": 60, **REPLY}
    body.update(fields, stream=stream)
    if not stream:
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["message"]
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        chunks = [c for c in events(response)[:-1] if c["choices"]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    return {
        key: "".join(d.get(key, "") for d in deltas)
        for key in ("reasoning_content", "content")
    }, deltas


def test_reasoning_apart_from_the_answer(client):
    message = ask(client)
    assert message == {
        "role": "assistant",
        "reasoning_content": "first, 2 + 2",
        "content": "It is 4.",
    }
    joined, deltas = ask(client, stream=True)
    assert joined == {"reasoning_content": "first, 2 + 2", "content": "It is 4."}
    # No delta carries tag text, and reasoning comes before content.
    assert all("think>" not in "".join(map(str, d.values())) for d in deltas)
    kinds = [k for d in deltas for k in d if d[k] and k != "role"]
    assert kinds == sorted(kinds, key=["reasoning_content", "content"].index)


def test_thinking_turned_off_in_the_template(client):
    message = ask(
        client,
        chat_template_kwargs={"enable_thinking": False},
        guided_regex="It is 4\\.",
        processors={},
    )
    assert message == {"role": "assistant", "content": "It is 4."}
    response = client.post(
        "/v1/chat/completions",
        json={"model": "qwen", "messages": MESSAGES, "chat_template_kwargs": [1]},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "chat_template_kwargs"


@pytest.mark.parametrize(
    "structure",
    [
        {"response_format": {"type": "json_object"}},
        {"guided_json": {"type": "integer"}},
        {"guided_choice": ["yes", "no"]},
    ],
)
def test_a_structured_answer_follows_the_thinking(client, structure):
    # The thinking is free text (here scripted), the answer after
    # `</think>` is held to the format.
    for seed in range(3):
        message = ask(
            client,
            processors={"thinking": {}},
            temperature=1.0,
            seed=seed,
            max_tokens=100,
            **structure,
        )
        assert message["reasoning_content"] == "first, 2 + 2"
        answer = message["content"]
        if "guided_choice" in structure:
            assert answer in ("yes", "no")
        elif "guided_json" in structure:
            assert isinstance(json.loads(answer), int)
        elif answer.strip().endswith("}"):  # else it ran out of tokens
            assert isinstance(json.loads(answer), dict)
