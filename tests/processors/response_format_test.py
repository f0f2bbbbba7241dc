"""The request forms of structured output, and their configs."""

import json

import pytest

from keras_gen import GenerationConfig
from keras_gen import processors
from keras_gen.processors import Choice
from keras_gen.processors import JsonObject
from keras_gen.processors import JsonSchema
from keras_gen.processors import Regex
from keras_gen.processors import StructuredOutput
from keras_gen.processors import from_response_format

SCHEMA = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}


@pytest.mark.parametrize(
    "value, kind, pattern_of",
    [
        ({"type": "json_object"}, JsonObject, JsonObject()),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": SCHEMA, "strict": True},
            },
            JsonSchema,
            JsonSchema(SCHEMA),
        ),
        ({"type": "regex", "pattern": "[0-9]+"}, Regex, Regex("[0-9]+")),
        ({"type": "choice", "choices": ["a", "b"]}, Choice, Choice(["a", "b"])),
        ({"json": SCHEMA}, JsonSchema, JsonSchema(SCHEMA)),
        ({"json": json.dumps(SCHEMA)}, JsonSchema, JsonSchema(SCHEMA)),
        ({"regex": "[0-9]+"}, Regex, Regex("[0-9]+")),
        ({"choice": ["a", "b"]}, Choice, Choice(["a", "b"])),
        ({"json_object": True}, JsonObject, JsonObject()),
    ],
    ids=[
        "openai-object",
        "openai-schema",
        "regex-type",
        "choice-type",
        "vllm-json",
        "vllm-json-text",
        "vllm-regex",
        "vllm-choice",
        "vllm-object",
    ],
)
def test_every_form_gives_its_processor(value, kind, pattern_of):
    constraint = from_response_format(value)
    assert type(constraint) is kind
    assert constraint.pattern() == pattern_of.pattern()


def test_text_and_lists():
    assert from_response_format({"type": "text"}) is None
    assert from_response_format(None) is None
    assert from_response_format([None, {"type": "text"}]) is None
    mixed = from_response_format([{"choice": ["a"]}, None, {"type": "json_object"}])
    assert isinstance(mixed, StructuredOutput)
    assert [type(c).__name__ if c else None for c in mixed.constraints] == [
        "Choice",
        None,
        "JsonObject",
    ]


def test_processors_round_trip_through_their_configs():
    for processor in (
        JsonSchema(SCHEMA),
        JsonObject(),
        Regex("a+"),
        Choice(["x"]),
        StructuredOutput([Choice(["x"]), None, Regex("b")]),
    ):
        again = processors.get(processors.serialize(processor))
        assert type(again) is type(processor)
        assert again.get_config() == processor.get_config()
    with pytest.raises(TypeError, match="one constraint"):
        StructuredOutput([StructuredOutput([None])])
    with pytest.raises(TypeError, match="list"):
        StructuredOutput(Choice(["x"]))


def test_generation_config_keeps_the_format_as_json():
    value = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
    config = GenerationConfig(response_format=value)
    assert json.loads(json.dumps(config.to_dict()))["response_format"] == value
    assert GenerationConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="`response_format`: .*cannot be compiled"):
        GenerationConfig(response_format={"json": {"type": "objec"}})
    with pytest.raises(TypeError, match="`response_format` must be a dict"):
        GenerationConfig(response_format="json")
    # A file with a bad format is read with the option dropped, as others.
    with pytest.warns(UserWarning, match="response_format"):
        loaded = GenerationConfig.from_dict(
            {"response_format": {"type": "nope"}, "top_k": 3}, strict=False
        )
    assert loaded.response_format is None and loaded.top_k == 3
