"""JSON schemas to regular expressions, numeric bounds included."""

import json
import re

import jsonschema
import numpy as np
import pytest

from keras_gen.kernels.json_schema import LARGEST_BOUND
from keras_gen.kernels.json_schema import MAX_FRACTION_DIGITS
from keras_gen.kernels.json_schema import integer_regex
from keras_gen.kernels.json_schema import number_regex
from keras_gen.kernels.json_schema import schema_regex


def test_integer_ranges_match_exactly_their_integers():
    rng = np.random.default_rng(0)
    for _ in range(400):
        low, high = sorted(int(v) for v in rng.integers(-1200, 1200, 2))
        low = None if rng.random() < 0.2 else low
        high = None if rng.random() < 0.2 else high
        pattern = re.compile(integer_regex(low, high))
        for n in range(-1500, 1501, 7):
            inside = (low is None or n >= low) and (high is None or n <= high)
            assert bool(pattern.fullmatch(str(n))) == inside, (low, high, n)
        for text in ("-0", "01", "+1", "1.0", ""):
            assert not pattern.fullmatch(text)


NUMBERS = [
    "0",
    "0.0",
    "0.5",
    "-0.5",
    "1",
    "1.0",
    "1.25",
    "2",
    "-1",
    "-1.0",
    "-1.5",
    "-2",
    "10",
    "10.01",
    "-10",
    "9.99",
    "-9.99",
    "3",
    "3.1",
    "-3.0",
    "100",
    "0.001",
    "-0.001",
    "19.9",
    "20",
]


def test_number_ranges_hold_only_numbers_within_them():
    rng = np.random.default_rng(1)
    for _ in range(600):
        low, high = sorted(float(v) for v in rng.integers(-20, 21, 2))
        low = None if rng.random() < 0.2 else low + rng.choice([0, 0.5])
        high = None if rng.random() < 0.2 else high
        if low is not None and high is not None and low > high:
            low, high = high, low
        low_open, high_open = bool(rng.random() < 0.4), bool(rng.random() < 0.4)
        try:
            pattern = re.compile(number_regex(low, high, low_open, high_open))
        except ValueError:
            continue  # nothing this regex writes lies within the bounds
        integral = all(b is None or b == int(b) for b in (low, high))
        for text in NUMBERS:
            x = float(text)
            inside = (low is None or (x > low if low_open else x >= low)) and (
                high is None or (x < high if high_open else x <= high)
            )
            matched = bool(pattern.fullmatch(text))
            assert not matched or inside, (low, high, low_open, high_open, text)
            # With integer bounds nothing within them is left out.
            assert matched or not inside or not integral, (low, high, text)
    digits = "1." + "3" * (MAX_FRACTION_DIGITS + 1)
    assert not re.fullmatch(number_regex(0, 2), digits)
    assert re.fullmatch(number_regex(0, 2), digits[:-1])


def test_schema_bounds_reach_the_regex():
    schema = {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "odd": {"type": "integer", "exclusiveMinimum": 2.5, "exclusiveMaximum": 5},
            "free": {"type": "number"},
        },
        "required": ["age", "p", "odd", "free"],
    }
    pattern = re.compile(schema_regex(schema))

    def text(age, p, odd, free):
        return json.dumps({"age": age, "p": p, "odd": odd, "free": free})

    assert pattern.fullmatch(text(120, 1, 3, -7.5))
    assert pattern.fullmatch(text(0, 0.25, 4, 1e3).replace("1000.0", "1000"))
    for bad in (
        text(121, 1, 3, 0),
        text(-1, 1, 3, 0),
        text(5, 0, 3, 0),
        text(5, 1.5, 3, 0),
        text(5, 1, 5, 0),
        text(5, 1, 2, 0),
    ):
        assert not pattern.fullmatch(bad), bad
    # Within a $ref and an array, the schema stays valid JSON Schema.
    schema = {
        "$defs": {"small": {"type": "integer", "minimum": 1, "maximum": 3}},
        "type": "array",
        "items": {"$ref": "#/$defs/small"},
        "maxItems": 2,
    }
    pattern = re.compile(schema_regex(schema))
    for value in ([1, 3], [2], []):
        assert pattern.fullmatch(json.dumps(value).replace(" ", ""))
        jsonschema.validate(value, schema)
    assert not pattern.fullmatch("[4]")


@pytest.mark.parametrize(
    "schema, match",
    [
        ("{not json", "not valid JSON"),
        ({"type": "objec"}, "cannot be compiled"),
        ({"type": "integer", "minimum": 3, "maximum": 2}, "No integer"),
        ({"type": "number", "minimum": 0.2, "maximum": 0.7}, "No number"),
        ({"type": "number", "minimum": "0"}, "`minimum` must be a number"),
        ({"type": "number", "exclusiveMaximum": float("nan")}, "must be finite"),
    ],
    ids=["json", "type", "empty-int", "narrow-number", "string-bound", "nan"],
)
def test_bad_schemas_say_why(schema, match):
    with pytest.raises(ValueError, match=match):
        schema_regex(schema)


def test_long_bounds_are_exact_and_cost_their_digits_not_two_to_the_digits():
    # 18-digit bounds (int64's range) match exactly their integers; the
    # expression grows with the square of the digits, not exponentially.
    low, high = -(2**63), 2**63 - 1
    pattern = re.compile(integer_regex(low, high))
    rng = np.random.default_rng(2)
    for n in [low, high, low - 1, high + 1, 0, -1, 10**18, -(10**18)] + [
        int(v) for v in rng.integers(low, high, 50, dtype=np.int64)
    ]:
        assert bool(pattern.fullmatch(str(n))) == (low <= n <= high), n
    assert len(integer_regex(-(10**300), 10**300)) < 100_000


@pytest.mark.parametrize("kind", ["integer", "number"])
def test_bounds_beyond_the_largest_move_in_to_it(kind):
    pattern = re.compile(
        schema_regex({"type": kind, "minimum": -1e300, "maximum": 1e308})
    )
    assert pattern.fullmatch(str(LARGEST_BOUND))
    assert pattern.fullmatch(str(-LARGEST_BOUND))
    assert not pattern.fullmatch(str(LARGEST_BOUND + 1))
    assert not pattern.fullmatch("1" + "0" * 300)
