"""Argument checks shared by options, samplers and processors.

Each check takes the argument's name and value, accepts Python and numpy
numbers alike (`np.float32(0.7)`, `np.int64(5)`), refuses booleans, NaN and
infinities unless asked, and returns a plain Python value. A failed check
raises a `TypeError` (wrong kind) or `ValueError` (out of range) whose
message names the argument and what it accepts.
"""

import math

import numpy as np

# Below this temperature, logits divided by it overflow float32: samplers
# refuse it, and `GenerationConfig` decodes greedily instead (as vLLM).
MIN_TEMPERATURE = 1e-5
# The largest finite float32.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# The largest n-gram `NoRepeatNGram` bans or prompt lookup matches (their
# comparisons are unrolled).
MAX_NGRAM_SIZE = 16
# Tokens a speculative draft may propose per step.
MAX_SPECULATIVE_TOKENS = 32
# Token id sequences (bad words, stop sequences, sequence biases): how many
# an option may hold, and how long each may be (the loop compares a
# sequence token by token, unrolled).
MAX_ID_SEQUENCES = 1024
MAX_ID_SEQUENCE_LENGTH = 32
# The largest int32: larger counts overflow the compiled programs.
INT32_MAX = 2**31 - 1


def is_int(value):
    """A Python or numpy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(
        value, (bool, np.bool_)
    )


def is_number(value):
    """A Python or numpy real number, not a bool."""
    return is_int(value) or isinstance(value, (float, np.floating))


def check_number(name, value, low=None, high=None, low_open=False, allow_inf=()):
    """A finite float in `[low, high]` (`(low, high]` with `low_open`).

    `allow_inf` may hold `float("-inf")` and/or `float("inf")`: those
    infinities are accepted as they are.
    """
    if not is_number(value):
        raise TypeError(f"`{name}` must be a number. Received: {name}={value!r}")
    # `str` first: np.float32(0.7) is 0.7, not 0.699999988079071.
    value = float(str(value)) if isinstance(value, np.floating) else float(value)
    if value in allow_inf:
        return value
    # Numbers reach the compiled programs as float32: beyond its range a
    # finite Python float becomes inf there.
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise ValueError(
            f"`{name}` must be finite (within float32's +-{FLOAT32_MAX:.4g}). "
            f"Received: {name}={value}"
        )
    too_low = low is not None and (value <= low if low_open else value < low)
    if too_low or (high is not None and value > high):
        raise ValueError(
            f"`{name}` must be {_bounds(low, high, low_open)}. Received: {name}={value}"
        )
    return value


def _bounds(low, high, low_open=False):
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}]"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    return f"<= {high}"


def check_positive(name, value):
    """A finite float > 0."""
    return check_number(name, value, low=0, low_open=True)


def check_temperature(name, value):
    """A finite float >= `MIN_TEMPERATURE`, with a hint for lower ones."""
    try:
        return check_number(name, value, low=MIN_TEMPERATURE)
    except ValueError:
        raise ValueError(
            f"`{name}` must be a finite number >= {MIN_TEMPERATURE}: lower ones "
            "overflow the logits (use GreedySampler, or temperature=0 in "
            f"`generate`, to decode greedily). Received: {name}={value}"
        ) from None


def check_probability(name, value):
    """A float in (0, 1]."""
    return check_number(name, value, low=0, high=1, low_open=True)


def check_fraction(name, value):
    """A float in [0, 1]."""
    return check_number(name, value, low=0, high=1)


def check_int(name, value, low=None, high=None, allow_none=False):
    """An int in `[low, high]`, or `None` when `allow_none`."""
    if value is None and allow_none:
        return None
    if not is_int(value):
        raise TypeError(f"`{name}` must be an int. Received: {name}={value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(
            f"`{name}` must be {_bounds(low, high)}. Received: {name}={value}"
        )
    return value


def check_count(name, value, allow_none=False):
    """An int >= 1, or `None` when `allow_none`."""
    return check_int(name, value, low=1, allow_none=allow_none)


def check_choice(name, value, allowed):
    """`value` if it is one of `allowed`, else a ValueError naming them."""
    if value not in allowed:
        raise ValueError(
            f"`{name}` must be one of {list(allowed)}. Received: {value!r}"
        )
    return value


def check_bool(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return bool(value)


def check_token_ids(name, token_ids, allow_empty=False):
    """A list of ints >= 0 from an int or a list, tuple or 1D array of them."""
    if is_int(token_ids):
        token_ids = [token_ids]
    if isinstance(token_ids, np.ndarray):
        token_ids = token_ids.tolist() if token_ids.ndim == 1 else None
    if not isinstance(token_ids, (list, tuple)):
        raise TypeError(
            f"`{name}` must be a token id or a list of token ids (ints >= 0). "
            f"Received: {name}={token_ids!r}"
        )
    bad = [t for t in token_ids if not is_int(t) or t < 0]
    if bad or (not allow_empty and len(token_ids) == 0):
        raise ValueError(
            f"`{name}` must be a non-empty list of token ids (ints >= 0). "
            f"Received: {name}={list(token_ids)!r}"
        )
    return [int(t) for t in token_ids]


def _short(value, limit=200):
    """`repr(value)`, cut to `limit` characters (errors quote huge inputs)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_token_sequences(name, sequences):
    """A non-empty list of at most `MAX_ID_SEQUENCES` non-empty token id
    lists, each at most `MAX_ID_SEQUENCE_LENGTH` long."""
    if (
        not isinstance(sequences, (list, tuple))
        or not sequences
        or not all(isinstance(s, (list, tuple, np.ndarray)) for s in sequences)
    ):
        raise ValueError(
            f"`{name}` must be a non-empty list of token id lists. "
            f"Received: {name}={_short(sequences)}"
        )
    if len(sequences) > MAX_ID_SEQUENCES or any(
        len(s) > MAX_ID_SEQUENCE_LENGTH for s in sequences
    ):
        raise ValueError(
            f"`{name}` may hold at most {MAX_ID_SEQUENCES} sequences of at most "
            f"{MAX_ID_SEQUENCE_LENGTH} token ids. Received {len(sequences)} "
            f"sequences, the longest {max(map(len, sequences))} ids."
        )
    return [check_token_ids(name, sequence) for sequence in sequences]


def check_strings(name, strings, max_count=None, max_length=None):
    """A list of non-empty strings (a lone string is refused, not split):
    at most `max_count` of them, each at most `max_length` characters."""
    if isinstance(strings, str) or not isinstance(strings, (list, tuple)):
        raise TypeError(
            f"`{name}` must be a list of strings. Received: {name}={_short(strings)}"
        )
    if not all(isinstance(s, str) and s for s in strings):
        raise ValueError(
            f"`{name}` must be a list of non-empty strings. "
            f"Received: {name}={_short(strings)}"
        )
    too_many = max_count is not None and len(strings) > max_count
    if too_many or (
        max_length is not None and max(map(len, strings), default=0) > max_length
    ):
        raise ValueError(
            f"`{name}` may hold at most {max_count} strings of at most "
            f"{max_length} characters. Received {len(strings)} strings, the "
            f"longest {max(map(len, strings))} characters."
        )
    return list(strings)
