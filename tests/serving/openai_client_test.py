"""The official `openai` client against the server: chat, streams, tools,
the Responses API and an agent loop."""

import json

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from keras_gen.serving import create_app  # noqa: E402
from tests.models.causal_lm_chat_test import chat_lm  # noqa: E402
from tests.serving.openai_app_test import running  # noqa: E402
from tests.serving.tool_calls_test import SCHEMAS  # noqa: E402
from tests.serving.tool_calls_test import TOOLS  # noqa: E402

pytestmark = pytest.mark.only_backend("jax")
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
# The template thinks; most of these tests turn it off (the random model
# rarely closes it, and what is constrained comes after it).
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
FLAT_TOOLS = [{"type": "function", **tool["function"]} for tool in TOOLS]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    lm = chat_lm("qwen", tmp_path_factory.mktemp("qwen"), max_sequence_length=1024)
    app = create_app(lm, model_name="qwen", max_batch_size=4, max_length=1024)
    with running(app) as http:
        yield openai.OpenAI(base_url=f"{http.base_url}/v1", api_key="none")


def test_chat_and_its_stream(client):
    options = dict(model="qwen", messages=QUESTION, max_tokens=12, temperature=0)
    answer = client.chat.completions.create(**options)
    assert answer.choices[0].finish_reason in ("stop", "length")
    stream = client.chat.completions.create(**options, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == answer.choices[0].message.content


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_time"}}]
)
def test_forced_tool_calls(client, choice):
    # One call (`parallel_tool_calls=False`), with the template's thinking
    # turned off (the random model rarely closes it).
    options = dict(
        model="qwen", messages=QUESTION, tools=TOOLS, tool_choice=choice,
        temperature=1.0, seed=3, max_tokens=150, parallel_tool_calls=False,
        extra_body=NO_THINKING,
    )  # fmt: skip
    answer = client.chat.completions.create(**options)
    (call,) = answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "tool_calls"
    jsonschema.validate(
        json.loads(call.function.arguments), SCHEMAS[call.function.name]
    )
    if isinstance(choice, dict):
        assert call.function.name == "get_time"
    stream = client.chat.completions.create(**options, stream=True)
    deltas = [c.choices[0].delta for c in stream if c.choices]
    (streamed,) = [d.tool_calls for d in deltas if d.tool_calls]
    assert streamed[0].function.name == call.function.name
    assert streamed[0].function.arguments == call.function.arguments


def test_auto_tools_answer_in_text_or_calls(client):
    answer = client.chat.completions.create(
        model="qwen", messages=QUESTION, tools=TOOLS, max_tokens=12, temperature=0
    )
    message = answer.choices[0].message
    assert message.tool_calls or message.content is not None


def test_responses_plain_streamed_and_continued(client):
    first = client.responses.create(
        model="qwen", input="What is a class?", instructions="Be brief.",
        max_output_tokens=10, temperature=0,
    )  # fmt: skip
    assert first.object == "response" and first.id.startswith("resp_")
    assert first.status in ("completed", "incomplete")
    assert first.usage.output_tokens <= 10
    events = list(
        client.responses.create(
            model="qwen", input="What is a class?", instructions="Be brief.",
            max_output_tokens=10, temperature=0, stream=True,
        )
    )  # fmt: skip
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] in (
        "response.completed",
        "response.incomplete",
    )
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == first.output_text == events[-1].response.output_text
    later = client.responses.create(
        model="qwen", input="And an object?", previous_response_id=first.id,
        max_output_tokens=5, temperature=0,
    )  # fmt: skip
    assert later.previous_response_id == first.id
    assert later.usage.input_tokens > first.usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        client.responses.create(
            model="qwen", input="x", previous_response_id="resp_gone"
        )


def test_responses_structured_text(client):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}},
        "required": ["city"],
    }
    response = client.responses.create(
        model="qwen", input="A city?", max_output_tokens=60, temperature=1.0,
        text={"format": {"type": "json_schema", "name": "city", "schema": schema}},
        extra_body=NO_THINKING,
    )  # fmt: skip
    jsonschema.validate(json.loads(response.output_text), schema)


def test_an_agent_loop(client):
    # The model calls a tool (forced), gets its result, then answers.
    messages = list(QUESTION)
    answer = client.chat.completions.create(
        model="qwen", messages=messages, tools=TOOLS, tool_choice="required",
        temperature=1.0, seed=0, max_tokens=150, parallel_tool_calls=False,
        extra_body=NO_THINKING,
    )  # fmt: skip
    message = answer.choices[0].message
    (call,) = message.tool_calls
    messages += [
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"},
    ]
    final = client.chat.completions.create(
        model="qwen", messages=messages, tools=TOOLS, tool_choice="none",
        max_tokens=8, temperature=0,
    )  # fmt: skip
    assert final.choices[0].message.content is not None
    assert not final.choices[0].message.tool_calls
    # The same loop through the Responses API.
    first = client.responses.create(
        model="qwen", input="What is the weather in Paris?", tools=FLAT_TOOLS,
        tool_choice="required", temperature=1.0, max_output_tokens=150,
        parallel_tool_calls=False, extra_body=NO_THINKING,
    )  # fmt: skip
    (item,) = [item for item in first.output if item.type == "function_call"]
    jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])
    second = client.responses.create(
        model="qwen", previous_response_id=first.id, tools=FLAT_TOOLS,
        tool_choice="none", max_output_tokens=8, temperature=0,
        input=[{"type": "function_call_output", "call_id": item.call_id, "output": "sunny"}],
    )  # fmt: skip
    assert second.status in ("completed", "incomplete")
    assert all(item.type != "function_call" for item in second.output)


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"max_output_tokens": -1}, "max_output_tokens"),
        ({"max_output_tokens": 10**9}, "max_output_tokens"),
        ({"temperature": 1e300}, "temperature"),
        (
            {
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "a",
                        "schema": {"type": "array", "minItems": 10**6},
                    }
                }
            },
            "text.format",
        ),
        ({"input": [{"type": "weird"}]}, "input[0]"),
    ],
)
def test_responses_errors_name_the_responses_fields(client, fields, param):
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="qwen", **{"input": "x", **fields})
    assert error.value.param == param
