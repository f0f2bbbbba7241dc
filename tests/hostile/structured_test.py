"""Hostile structured output: a schema, pattern or choice list is refused by
name before outlines-core allocates anything, or built in bounded time and
memory (in a child process under a memory limit, so a build that runs away
fails the test instead of taking the machine)."""

import json
import re
import reprlib

import pytest

from keras_gen.processors import Choice
from keras_gen.processors import JsonObject
from keras_gen.processors import JsonSchema
from keras_gen.processors import Regex
from tests.kernels.automaton_test import build_in_child
from tests.text_models import tiny_text_lm

TOO_LARGE = "is too large: its automaton would have about"


def _deep(depth):
    schema = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


DEEP = _deep(100_000)


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize(
    "schema, error, match",
    [
        ({"type": "array", "minItems": 10**6}, ValueError, TOO_LARGE),
        (
            {"type": "array", "maxItems": 10**6, "items": {"type": "integer"}},
            ValueError,
            TOO_LARGE,
        ),
        ({"type": "string", "minLength": 10**5}, ValueError, TOO_LARGE),
        ({"type": "string", "maxLength": 10**6}, ValueError, TOO_LARGE),
        ({"type": "string", "pattern": "a{100000}"}, ValueError, TOO_LARGE),
        ({"type": "string", "pattern": "(a{100}){100}"}, ValueError, TOO_LARGE),
        (
            {
                "type": "array",
                "maxItems": 10,
                "items": {
                    "type": "array",
                    "maxItems": 10,
                    "items": {
                        "type": "array",
                        "maxItems": 10,
                        "items": {"type": "string", "maxLength": 20},
                    },
                },
            },
            ValueError,
            TOO_LARGE,
        ),
        ({"type": "string", "pattern": ".{0,1000}"}, ValueError, TOO_LARGE),
        ({"type": "string", "pattern": "(?=a)b"}, ValueError, "look-around"),
        ({"type": "string", "pattern": "(a"}, ValueError, "unbalanced"),
        ({"type": "objec"}, ValueError, "cannot be compiled"),
        ({"$ref": "#/definitions/missing"}, ValueError, "cannot be compiled"),
        ({"type": "string", "format": "nonsense"}, ValueError, "Format nonsense"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, ValueError, "maxLength"),
        (
            {"type": "integer", "minimum": 5, "maximum": 1},
            ValueError,
            "No integer lies",
        ),
        (
            {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1},
            ValueError,
            "No number lies",
        ),
        ({"type": "number", "minimum": "x"}, ValueError, "`minimum` must be a number"),
        (
            {"type": "number", "maximum": float("inf")},
            ValueError,
            "`maximum` must be finite",
        ),
        (
            {"type": "number", "minimum": float("nan")},
            ValueError,
            "`minimum` must be finite",
        ),
        ({"enum": []}, ValueError, "`enum` is empty"),
        ({"anyOf": []}, ValueError, "`anyOf` is empty"),
        (
            {"type": "object", "properties": {"a": {"oneOf": []}}},
            ValueError,
            "`oneOf` is empty",
        ),
        ({"not": {}}, ValueError, "cannot be compiled"),
        ([1], TypeError, "must be a dict"),
        ("{not json", ValueError, "not valid JSON"),
        ("[" * 100_000, ValueError, "not valid JSON"),
        (5, TypeError, "must be a dict"),
        (DEEP, ValueError, "nests too deeply"),
    ],
    ids=lambda value: (
        value.__name__ if isinstance(value, type) else reprlib.repr(value)[:50]
    ),
)
def test_a_hostile_schema_is_refused_by_name_before_building(schema, error, match):
    with pytest.raises(error, match=match):
        JsonSchema(schema)


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: Regex("a{100000}"), ValueError, TOO_LARGE),
        (lambda: Regex(".{0,1000}"), ValueError, TOO_LARGE),
        (lambda: Regex("[^x]{5000}"), ValueError, TOO_LARGE),
        (lambda: Regex("(ab|cd){3000}"), ValueError, TOO_LARGE),
        (lambda: Regex("a)|(b"), ValueError, "unbalanced"),
        (lambda: Regex("(?<=a)b"), ValueError, "look-around"),
        (lambda: Regex(r"(a)\1"), ValueError, "back-references"),
        (lambda: Regex(5), TypeError, "pattern"),
        (
            lambda: Choice([f"option {i}" for i in range(100_000)]),
            ValueError,
            "`options` is too large",
        ),
        (lambda: Choice(["x" * 10_000]), ValueError, "`options` is too large"),
        (lambda: Choice([]), ValueError, "non-empty"),
        (lambda: Choice(["yes", ""]), ValueError, "non-empty"),
        (lambda: Choice("yes"), TypeError, "list of strings"),
    ],
    ids=[
        "a{100000}",
        ".{0,1000}",
        "[^x]{5000}",
        "(ab|cd){3000}",
        "unbalanced",
        "look-behind",
        "back-reference",
        "not a string",
        "100k choices",
        "10k-character choice",
        "no choices",
        "an empty choice",
        "a string",
    ],
)
def test_a_hostile_pattern_or_choice_is_refused_by_name(make, error, match):
    with pytest.raises(error, match=match):
        make()


# Built in one child process under a memory limit, within five minutes.
LARGEST_ACCEPTED = [
    ("schema", {"type": "string", "maxLength": 250}),
    (
        "schema",
        {
            "type": "object",
            "properties": {
                "a": {"type": "string", "maxLength": 40},
                "b": {"type": "string", "maxLength": 40},
            },
            "required": ["a", "b"],
        },
    ),
    ("schema", {"type": "integer", "minimum": -1e300, "maximum": 1e300}),
    ("schema", {"type": "number", "minimum": 0, "maximum": 1e308}),
    ("schema", {"type": "array", "items": {"type": "integer"}, "maxItems": 50}),
    ("schema", {"enum": [f"value {i}" for i in range(300)]}),
    ("schema", {"type": "string", "format": "date-time"}),
    ("schema", {"type": "object"}),
    ("regex", "[a-z]{0,4000}"),
    ("regex", r"\p{L}{1,50}"),
    ("regex", JsonObject().pattern()),
]


@pytest.mark.only_backend("jax")
def test_the_largest_accepted_constraints_build_within_bounds():
    states = build_in_child(LARGEST_ACCEPTED, timeout=300)
    assert len(states) == len(LARGEST_ACCEPTED) and min(states) > 1, states


@pytest.fixture(scope="module")
def lm():
    return tiny_text_lm()


@pytest.mark.parametrize(
    "processor, check",
    [
        (Regex("(yes|no)"), lambda text: text in ("yes", "no")),
        (Choice(["alpha", "beta gamma"]), lambda text: text in ("alpha", "beta gamma")),
        (
            JsonSchema({"type": "integer", "minimum": -1e300, "maximum": 1e300}),
            lambda text: abs(int(text)) <= 10**18,
        ),
        (
            JsonSchema({"type": "string", "maxLength": 8}),
            lambda text: len(json.loads(text)) <= 8,
        ),
        (
            Regex("[a-z]{3}-[0-9]{2}"),
            lambda text: re.fullmatch("[a-z]{3}-[0-9]{2}", text),
        ),
    ],
    ids=["yes|no", "choice", "huge integer bounds", "short string", "code"],
)
def test_hostile_constraints_still_give_exact_output_on_every_backend(
    lm, processor, check
):
    # Sampled, so that the constraint and not the model's preference decides.
    texts = lm.generate(
        ["Answer:"] * 3,
        max_new_tokens=40,
        processors=[processor],
        temperature=1.0,
        top_k=0,
        seed=3,
    )
    for text in texts:
        answer = text[len("Answer:") :]
        assert check(answer), answer
