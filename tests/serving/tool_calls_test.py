"""Tool calling in `/v1/chat/completions`: parsed calls, and calls forced
by `tool_choice` inside the compiled loop."""

import json
import re

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")

from keras_gen.serving import create_app  # noqa: E402
from tests.models.causal_lm_chat_test import chat_lm  # noqa: E402
from tests.script_processor import Script  # noqa: E402
from tests.serving.openai_app_test import events  # noqa: E402
from tests.serving.openai_app_test import running  # noqa: E402

pytestmark = pytest.mark.only_backend("jax")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city over a few days.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 8},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"],
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
# The template thinks: the calls are held to their schemas after
# `</think>`. These tests turn the thinking off (a random model rarely
# closes it).
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
OPENING = "Let me check.\n<tool_call>"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    # The tools' schemas take ~500 of the tiny vocabulary's tokens.
    lm = chat_lm("qwen", tmp_path_factory.mktemp("qwen"), max_sequence_length=1024)
    opening = Script(lm.tokenizer.encode(OPENING))
    app = create_app(
        lm, model_name="qwen", max_batch_size=8, max_length=1024,
        logits_processors={"opening": opening},
    )  # fmt: skip
    with running(app) as client:
        yield client


def chat(client, **fields):
    body = {
        "model": "qwen", "messages": MESSAGES, "tools": TOOLS, **NO_THINKING,
        **fields,
    }  # fmt: skip
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"]


def test_required_calls_always_parse_and_validate(client):
    calls = []
    for seed in range(10):  # 50 samples at temperature 1
        for choice in chat(
            client, tool_choice="required", n=5, temperature=1.0, seed=seed,
            max_tokens=150, parallel_tool_calls=False,
        ):  # fmt: skip
            assert choice["finish_reason"] == "tool_calls"
            assert choice["message"]["content"] is None
            (call,) = choice["message"]["tool_calls"]
            assert call["type"] == "function" and call["id"].startswith("call_")
            name = call["function"]["name"]
            jsonschema.validate(
                json.loads(call["function"]["arguments"]), SCHEMAS[name]
            )
            calls.append(name)
    assert len(calls) == 50
    assert set(calls) == {"get_weather", "get_time"}  # random, both chosen


def test_parallel_calls_each_validate(client):
    counts = []
    for choice in chat(
        client, tool_choice="required", n=8, temperature=1.0, seed=0, max_tokens=400
    ):
        if choice["finish_reason"] != "tool_calls":  # ran out of tokens
            continue
        calls = choice["message"]["tool_calls"]
        for call in calls:
            name = call["function"]["name"]
            jsonschema.validate(
                json.loads(call["function"]["arguments"]), SCHEMAS[name]
            )
        assert len({call["id"] for call in calls}) == len(calls)
        counts.append(len(calls))
    assert counts and max(counts) > 1  # a random model makes several


def test_auto_holds_a_call_the_model_opens_to_its_schema(client):
    # The reply's start is scripted up to the opened call; the model
    # (random) writes the rest under the tools' schemas.
    for seed in range(5):
        (choice,) = chat(
            client, tool_choice="auto", temperature=1.0, seed=seed, max_tokens=150,
            processors={"opening": {}}, parallel_tool_calls=False,
        )  # fmt: skip
        assert choice["finish_reason"] == "tool_calls", choice
        assert choice["message"]["content"] == "Let me check.\n"
        for call in choice["message"]["tool_calls"]:
            name = call["function"]["name"]
            jsonschema.validate(
                json.loads(call["function"]["arguments"]), SCHEMAS[name]
            )
    # Without the call opened, the reply is free text.
    (free,) = chat(client, tool_choice="auto", temperature=1.0, seed=0, max_tokens=8)
    assert free["finish_reason"] == "length" and free["message"]["content"]


def test_a_named_function_is_the_one_called(client):
    named = {"type": "function", "function": {"name": "get_time"}}
    for choice in chat(client, tool_choice=named, n=3, temperature=1.0, seed=0):
        for call in choice["message"]["tool_calls"]:  # one or more
            assert call["function"]["name"] == "get_time"
            zone = json.loads(call["function"]["arguments"])["zone"]
            assert zone in ("UTC", "CET")


CALLED = (
    "Let me check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
    "\n</tool_call>"
)


def test_auto_parses_what_the_model_writes(client):
    # The reply is forced character by character (the model is random).
    pattern = re.sub(r"([.{}])", r"\\\1", CALLED).replace("\n", "\\n")
    fields = dict(tool_choice="auto", guided_regex=pattern)
    (choice,) = chat(client, **fields)
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check.\n"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {
        "name": "get_weather",
        "arguments": json.dumps({"city": "Paris", "days": 2}),
    }
    body = {"model": "qwen", "messages": MESSAGES, "tools": TOOLS, "stream": True}
    body.update(NO_THINKING)
    with client.stream("POST", "/v1/chat/completions", json={**body, **fields}) as r:
        chunks = [c for c in events(r)[:-1] if c["choices"]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    content = "".join(d.get("content") or "" for d in deltas)
    assert content == "Let me check.\n"  # no call text streamed as content
    (streamed,) = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert streamed[0]["index"] == 0
    assert streamed[0]["function"] == call["function"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # Without tools (or with "none"), the same text is content.
    (plain,) = chat(client, tool_choice="none", guided_regex=fields["guided_regex"])
    assert (
        plain["message"]["content"] == CALLED and "tool_calls" not in plain["message"]
    )


def test_a_conversation_with_calls_and_results(client):
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Paris", "days": 1}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    (choice,) = chat(client, messages=history, max_tokens=5, tool_choice="none")
    assert choice["finish_reason"] in ("stop", "length")
    tokens = client.post(
        "/tokenize", json={"messages": history, "tools": TOOLS}
    ).json()["tokens"]
    text = client.post("/detokenize", json={"tokens": tokens}).json()["prompt"]
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "days": 1}}' in text


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"tools": None, "tool_choice": "required"}, "tool_choice"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        ({"tool_choice": "always"}, "tool_choice"),
        (
            {"tools": [{"type": "function", "function": {"name": "bad name"}}]},
            "tools[0]",
        ),
        ({"tools": [WEATHER, WEATHER]}, "tools[1]"),
        ({"tools": []}, "tools"),
        ({"tool_choice": "required", "guided_regex": "a"}, "tool_choice"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"messages": [{"role": "assistant", "tool_calls": "x"}]}, "messages[0]"),
        ({"messages": [{"role": "user"}]}, "messages[0]"),
    ],
)
def test_bad_tool_fields_are_named(client, fields, param):
    body = {"model": "qwen", "messages": MESSAGES, "tools": TOOLS, **fields}
    body = {k: v for k, v in body.items() if v is not None}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
