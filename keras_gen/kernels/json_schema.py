"""Regular expressions for JSON schemas, with the numeric bounds kept.

`outlines-core` turns a JSON schema into a regular expression but drops
`minimum` and `maximum`. Here bounded integers, and all numbers, are set
aside before it runs (as placeholders) and replaced by expressions that
hold only numbers within their bounds, written without exponent and with
at most `MAX_FRACTION_DIGITS` digits after the point (a float64 holds 15
to 17 significant digits), so that a sampled number cannot run on until
the length limit. Bounds beyond `LARGEST_BOUND` in size are moved in to it.
"""

import json
import math

from outlines_core import json_schema as outlines_schema

from keras_gen.utils.files import parse_json

# JSON's whitespace between tokens: at most one space (outlines-core's
# default), so that a model cannot spend its length limit on blanks.
WHITESPACE = r"[ ]?"
MAX_FRACTION_DIGITS = 15
FRACTION = rf"(\.[0-9]{{1,{MAX_FRACTION_DIGITS}}})?"
ZERO_FRACTION = rf"(\.0{{1,{MAX_FRACTION_DIGITS}}})?"
# The largest bound kept: a bound beyond it (`"maximum": 1e308`) moves in
# to it, since the expression of the numbers up to a bound grows with the
# square of its digits.
LARGEST_BOUND = 10**18
# A fraction that is not zero: it ends with a non-zero digit.
NONZERO_FRACTION = rf"\.[0-9]{{0,{MAX_FRACTION_DIGITS - 1}}}[1-9]"


def _same_length(low, high):
    """Alternatives matching the digit strings from `low` to `high`, two
    strings of one length."""
    if low == high:
        return [low]
    if low == "0" * len(low) and high == "9" * len(high):  # any digits
        return [f"[0-9]{{{len(low)}}}"]
    if len(low) == 1:
        return [f"[{low}-{high}]"]
    if low[0] == high[0]:
        return [low[0] + rest for rest in _same_length(low[1:], high[1:])]
    width = len(low) - 1
    parts = [low[0] + rest for rest in _same_length(low[1:], "9" * width)]
    if int(low[0]) + 1 <= int(high[0]) - 1:
        parts.append(f"[{int(low[0]) + 1}-{int(high[0]) - 1}][0-9]{{{width}}}")
    return parts + [high[0] + rest for rest in _same_length("0" * width, high[1:])]


def digits_between(low, high=None):
    """A regular expression for the integers `low <= n <= high` (`high`
    `None`: no upper bound) written without sign or leading zeros;
    `low >= 0`. `None` when there are none."""
    if high is not None and high < low:
        return None
    parts = []
    top = len(str(low)) if high is None else len(str(high))
    for digits in range(len(str(low)), top + 1):
        first = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        last = 10**digits - 1 if high is None else min(high, 10**digits - 1)
        if first <= last:
            parts += _same_length(str(first), str(last))
    if high is None:
        parts.append(f"[1-9][0-9]{{{top},}}")
    return "(" + "|".join(parts) + ")"


def integer_regex(low=None, high=None):
    """The JSON integers `low <= n <= high` (either bound may be `None`)."""
    parts = []
    if low is None or low < 0:  # magnitudes of the negative ones
        first = 1 if high is None or high >= 0 else -high
        digits = digits_between(first, None if low is None else -low)
        parts += ["-" + digits] if digits else []
    if high is None or high >= 0:
        digits = digits_between(0 if low is None or low < 0 else low, high)
        parts += [digits] if digits else []
    if not parts:
        raise ValueError(f"No integer lies between {low} and {high}.")
    return "(" + "|".join(parts) + ")"


def _magnitudes(low, low_open, high, high_open):
    """Alternatives for the unsigned decimals from `low` to `high`
    (integers; `high` `None`: no bound), each end open or closed."""
    if high is not None and (high < low or (high == low and (low_open or high_open))):
        return []
    parts, first = [], low
    if low_open:  # `low` itself only with a non-zero fraction
        parts.append(f"{low}{NONZERO_FRACTION}")
        first = low + 1
    below = digits_between(first, None if high is None else high - 1)
    if below:
        parts.append(below + FRACTION)
    if high is not None and not high_open and high >= first:
        parts.append(f"{high}{ZERO_FRACTION}")
    return parts


def number_regex(low=None, high=None, low_open=False, high_open=False):
    """The JSON numbers from `low` to `high` (open ends with `low_open` /
    `high_open`; `None`: unbounded), written without exponent.

    A fractional bound is moved inwards to the next integer: every number
    given is within bounds, though not every number within bounds is
    given. `ValueError` when that leaves none.
    """
    if low is not None and low != math.ceil(low):
        low, low_open = math.ceil(low), False
    if high is not None and high != math.floor(high):
        high, high_open = math.floor(high), False
    low = None if low is None else int(low)
    high = None if high is None else int(high)
    parts = []
    if high is None or high >= 0:
        at_least_zero = low is None or low < 0
        parts += _magnitudes(
            0 if at_least_zero else low,
            False if at_least_zero else low_open,
            high,
            high_open,
        )
    if low is None or low < 0:  # -m with m above 0 (or -high) up to -low
        above_zero = high is None or high >= 0
        negative = _magnitudes(
            0 if above_zero else -high,
            True if above_zero else high_open,
            None if low is None else -low,
            low_open,
        )
        parts += ["-" + part for part in negative]
    if not parts:
        raise ValueError(f"No number lies between {low} and {high}.")
    return "(" + "|".join(parts) + ")"


def _bound(schema, name, exclusive_name, tighter):
    """`(value, open)`: the tighter of `schema[name]` and its exclusive
    form, `(None, False)` when neither is set."""
    value, exclusive = schema.get(name), schema.get(exclusive_name)
    for key, number in ((name, value), (exclusive_name, exclusive)):
        if number is None or (key == exclusive_name and isinstance(number, bool)):
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"`{key}` must be a number. Received: {number!r}")
        if not math.isfinite(number):
            raise ValueError(f"`{key}` must be finite. Received: {number!r}")
    if isinstance(exclusive, bool):  # draft 4: a flag on the bound
        return value, exclusive and value is not None
    candidates = [
        (v, o) for v, o in ((value, False), (exclusive, True)) if v is not None
    ]
    if not candidates:
        return None, False
    # At a tie the open bound is the tighter.
    return tighter(candidates, key=lambda c: (c[0], c[1] == (tighter is max)))


def _numeric_regex(schema):
    """The regex of a number schema or a bounded integer one, or `None`."""
    kind = schema.get("type")
    if kind not in ("integer", "number"):
        return None
    low, low_open = _bound(schema, "minimum", "exclusiveMinimum", max)
    high, high_open = _bound(schema, "maximum", "exclusiveMaximum", min)
    # Bounds beyond `LARGEST_BOUND` move inwards to it.
    if low is not None and low < -LARGEST_BOUND:
        low, low_open = -LARGEST_BOUND, False
    if high is not None and high > LARGEST_BOUND:
        high, high_open = LARGEST_BOUND, False
    if kind == "number":
        return number_regex(low, high, low_open, high_open)
    if low is None and high is None:
        return None
    if low is not None:
        low = math.floor(low) + 1 if low_open else math.ceil(low)
    if high is not None:
        high = math.ceil(high) - 1 if high_open else math.floor(high)
    return integer_regex(low, high)


def schema_regex(schema):
    """The regular expression of the JSON texts that `schema` accepts.

    Args:
        schema: a JSON schema, as a dict or a JSON string.

    Raises:
        ValueError: the schema is not valid JSON, or outlines-core cannot
            turn it into a regular expression (the error says why).

    Examples:
    >>> import re
    >>> pattern = schema_regex({"type": "integer", "minimum": 0, "maximum": 120})
    >>> [bool(re.fullmatch(pattern, s)) for s in ("0", "120", "121", "-1")]
    [True, True, False, False]
    """
    if isinstance(schema, str):
        schema = parse_json(schema, "The JSON schema")
    if not isinstance(schema, (dict, bool)):
        raise TypeError(f"A JSON schema must be a dict. Received: {schema!r}")
    text = json.dumps(schema)
    placeholders = {}

    def set_aside(node):
        if isinstance(node, list):
            return [set_aside(item) for item in node]
        if not isinstance(node, dict):
            return node
        for key in ("enum", "anyOf", "oneOf", "allOf"):
            if node.get(key) == []:
                raise ValueError(
                    f"The JSON schema's `{key}` is empty: outlines-core would "
                    "allow only empty text, which is no JSON value."
                )
        pattern = _numeric_regex(node)
        if pattern is not None:
            marker = f"kgbound{len(placeholders)}x"
            while marker in text:
                marker += "x"
            placeholders[marker] = pattern
            return {"const": marker}
        return {key: set_aside(value) for key, value in node.items()}

    schema = set_aside(schema)
    try:
        pattern = outlines_schema.build_regex_from_schema(
            json.dumps(schema), WHITESPACE
        )
    except Exception as error:  # outlines-core raises plain errors
        raise ValueError(f"The JSON schema cannot be compiled: {error}") from None
    for marker, bounded in placeholders.items():
        pattern = pattern.replace(f'"{marker}"', bounded)
    return pattern
