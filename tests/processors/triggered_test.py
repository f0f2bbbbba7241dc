"""`Triggered`: free text until a trigger, then a structured output."""

import re

import pytest

from keras_gen.processors import JsonSchema
from keras_gen.processors import Regex
from keras_gen.processors import StructuredOutput
from keras_gen.processors import Triggered
from keras_gen.processors import registry
from tests.script_processor import Script
from tests.text_models import tiny_text_lm

OPENING = "The for statement is"


@pytest.fixture(scope="module")
def lm():
    return tiny_text_lm()


def test_what_follows_the_trigger_is_held_to_the_constraint(lm):
    # The scripted opening writes the trigger; the random model the rest.
    opening = Script(lm.tokenizer.encode(OPENING))
    answer = Triggered(Regex(" [0-9]{2}"), " is", required=True)
    for seed in range(3):
        text = lm.generate(
            "A", processors=[opening, answer], do_sample=True, seed=seed,
            max_new_tokens=20, strip_prompt=True,
        )  # fmt: skip
        assert re.fullmatch(f"{OPENING} [0-9]{{2}}", text), text
    # Required: a reply that never writes the trigger does not end.
    never = Triggered(Regex("a"), "\x07", required=True)
    record = lm.generate(
        "A", processors=[never], max_new_tokens=6, return_dict=True, seed=0
    )
    assert record.finish_reasons == ["length"]


def test_a_configuration_round_trip():
    after = Triggered.after_thinking(JsonSchema({"type": "integer"}), thinking=False)
    assert after.trigger == "<think>" and after.at_start
    assert after.otherwise.get_config() == {"schema": {"type": "integer"}}
    assert after.constraint.trigger == "</think>" and after.constraint.required
    again = registry.get(registry.serialize(after))
    assert again.get_config() == after.get_config()
    rows = StructuredOutput([after, None])
    assert registry.get(registry.serialize(rows)).get_config() == rows.get_config()
    # A tool call's constraint waits itself; it need not end in the thinking.
    call = Triggered(Regex("x"), "<tool_call>")
    opened = Triggered.after_thinking(call, thinking=True)
    assert opened.constraint is call and not opened.required


@pytest.mark.parametrize(
    "arguments, error, match",
    [
        (("x", "a"), TypeError, "`constraint` must be a structured output"),
        ((Regex("a"), ""), ValueError, "1 to 64 UTF-8 bytes"),
        ((Regex("a"), "é" * 33), ValueError, "1 to 64 UTF-8 bytes"),
        ((Regex("a"), "a", False, False, Regex("b")), ValueError, "at_start=True"),
        (
            (StructuredOutput([Regex("a")]), "a"),
            TypeError,
            "structured output of one constraint",
        ),
    ],
)
def test_bad_arguments(arguments, error, match):
    with pytest.raises(error, match=match):
        Triggered(*arguments)
