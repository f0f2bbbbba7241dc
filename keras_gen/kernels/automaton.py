"""A regular expression's automaton over a vocabulary's tokens."""

import re

import numpy as np
from outlines_core import Index
from outlines_core import Vocabulary

from keras_gen.utils.lru_cache import LRUCache

# Where a token without a transition of its own leads (`Automaton.defaults`):
# nowhere (a token the state does not allow), or out of every constraint.
TO_DEAD = -1
TO_FREE = -2
# Automata and vocabularies kept for reuse (least recently used dropped).
MAX_AUTOMATA = 64
MAX_VOCABULARIES = 4
# Allowed tokens are bit-packed in 32-bit words.
WORD_BITS = 32
# The largest automaton built, in estimated states (`regex_size`): beyond
# it outlines-core's work and memory grow past what one request may take.
MAX_REGEX_SIZE = 4096
# Estimated states of one character that may be any of thousands of code
# points (`.`, `[^...]`, `\p{...}`): their UTF-8 bytes take several.
WIDE_CHARACTER_SIZE = 11
# outlines-core builds its DFA for unanchored search too, which can take
# time exponential in a repetition count when the pattern's first
# character recurs inside it (`"(?:[^"\\]|\\"){0,30}"`: every escaped
# quote may start another match). Every pattern is built behind this
# character, a noncharacter no text holds, read by a token of its own;
# the automaton starts after it.
ANCHOR = "\U0010ffff".encode()
ANCHOR_PATTERN = r"\x{10FFFF}"
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")

_automata = LRUCache(MAX_AUTOMATA)
_vocabularies = LRUCache(MAX_VOCABULARIES)
# Patterns whose syntax was checked (a check builds a byte-level index).
_checked = LRUCache(4 * MAX_AUTOMATA)


def cached(key, make):
    """The automaton kept under `key`, or `make()`'s, kept."""
    return _automata.get(key, make)


def words(vocabulary_size):
    """How many 32-bit words hold one bit per token."""
    return -(-vocabulary_size // WORD_BITS)


def pack_bits(token_lists, vocabulary_size):
    """`(len(token_lists), words)` int32: bit `t` set for each token `t`."""
    bits = np.zeros((len(token_lists), vocabulary_size), bool)
    for row, tokens in enumerate(token_lists):
        bits[row, tokens] = True
    return pack_mask(bits)


def pack_mask(mask):
    """`(rows, words)` int32 of a `(rows, vocab)` bool mask, bit-packed."""
    rows, vocabulary_size = mask.shape
    bits = np.zeros((rows, words(vocabulary_size) * WORD_BITS), bool)
    bits[:, :vocabulary_size] = mask
    packed = np.packbits(bits.reshape(rows, -1, WORD_BITS), axis=-1, bitorder="little")
    return packed.view("<u4")[..., 0].astype(np.uint32).view(np.int32)


def _class_end(pattern, i):
    """The position after the character class that starts at `i`, and
    whether it is negated."""
    j = i + 1
    negated = pattern[j : j + 1] == "^"
    j += negated
    j += pattern[j : j + 1] == "]"  # a leading `]` is a character
    depth = 1
    while j < len(pattern) and depth:
        if pattern[j] == "\\":
            j += 2
            continue
        depth += {"[": 1, "]": -1}.get(pattern[j], 0)
        j += 1
    return j, negated


def regex_size(pattern):
    """An estimate of the states of `pattern`'s automaton, read from its
    text before anything is built, and the largest repetition count in it.

    Each character (or class) is a state, a wide one (`.`, `[^...]`,
    `\\p{...}`) `WIDE_CHARACTER_SIZE`; alternatives add up; a counted
    repetition `{n}`, `{n,}`, `{n,m}` copies what it repeats (`n + 1` or
    `m` times). Nested repetitions multiply, as they do in the automaton.

    Raises:
        ValueError: the parentheses do not balance.
    """
    # Per open group: the alternatives so far, this branch, its last atom.
    stack = [[0, 0, 0]]
    largest = 0
    i = 0
    while i < len(pattern):
        frame, c = stack[-1], pattern[i]
        size = None
        if c == "\\":
            kind = pattern[i + 1 : i + 2]
            i += 2
            if kind in ("x", "p", "P", "u", "U") and pattern[i : i + 1] == "{":
                i = pattern.find("}", i) + 1 or len(pattern)
            size = WIDE_CHARACTER_SIZE if kind in ("p", "P", "W", "S", "D") else 1
        elif c == "[":
            i, negated = _class_end(pattern, i)
            size = WIDE_CHARACTER_SIZE if negated else 1
        elif c == "(":
            stack.append([0, 0, 0])
            i += 1
        elif c == ")":
            if len(stack) == 1:
                raise ValueError(f"an unbalanced `)` at {i}")
            alternatives, branch, _ = stack.pop()
            size = alternatives + branch
            i += 1
        elif c == "|":
            frame[0], frame[1], frame[2] = frame[0] + frame[1], 0, 0
            i += 1
        elif c in "*+?":
            i += 1
        elif c == "{" and _REPEAT.match(pattern, i):
            match = _REPEAT.match(pattern, i)
            low = int(match.group(1))
            high = int(match.group(3)) if match.group(3) else low + bool(match.group(2))
            copies = max(low, high, 1)
            largest = max(largest, low, high)
            frame[1] += frame[2] * (copies - 1)
            frame[2] *= copies
            i = match.end()
        else:
            size = WIDE_CHARACTER_SIZE if c == "." else 1
            i += 1
        if size is not None:
            stack[-1][1] += size
            stack[-1][2] = size
    if len(stack) > 1:
        raise ValueError("an unbalanced `(`")
    return stack[0][0] + stack[0][1], largest


def check_regex_size(pattern, name="pattern"):
    """Raise a `ValueError` naming `name` if `pattern`'s automaton would
    have more than `MAX_REGEX_SIZE` states (estimated by `regex_size`),
    or if its parentheses do not balance."""
    try:
        size, largest = regex_size(pattern)
    except ValueError as error:
        raise ValueError(
            f"`{name}` {pattern[:200]!r} is not a regular expression: it has {error}."
        ) from None
    if size > MAX_REGEX_SIZE:
        raise ValueError(
            f"`{name}` is too large: its automaton would have about {size} "
            f"states, more than the {MAX_REGEX_SIZE} allowed (its largest "
            f"repetition count is {largest}). Lower the lengths and counts it "
            "repeats."
        )
    return pattern


def check_regex(pattern, name="pattern"):
    """Raise a `ValueError` naming `name` if outlines-core cannot compile
    `pattern` (built over single bytes: the syntax is checked, whatever
    the tokenizer)."""

    check_regex_size(pattern, name)

    def check():
        vocabulary = _vocabularies.get(
            "bytes",
            lambda: Vocabulary(
                256, {bytes([b]): [b] for b in range(256)} | {ANCHOR: [257]}
            ),
        )
        try:
            Index(_anchored(pattern), vocabulary)
        except Exception as error:  # outlines-core raises plain errors
            raise ValueError(
                f"`{name}` {pattern[:200]!r} is not a regular expression "
                f"outlines-core compiles ({error}): the syntax is Rust's "
                "`regex`, without look-around or back-references."
            ) from None
        return True

    # A pattern that fails is not kept: it raises every time.
    _checked.get(pattern, check)
    return pattern


def _anchored(pattern):
    return f"{ANCHOR_PATTERN}(?:{pattern})"


def _vocabulary(tokenizer, vocabulary_size):
    """outlines-core's `Vocabulary` of the tokenizer's non-special tokens."""

    def make():
        table = {}
        for token_id, token in enumerate(tokenizer.token_bytes[:vocabulary_size]):
            if token:  # not special, not empty
                table.setdefault(token, []).append(token_id)
        # No token of the table ends a row: stop tokens are the loop's own
        # (allowed in accepting states); this id is out of range, and the
        # anchor's the one after it.
        table.setdefault(ANCHOR, []).append(vocabulary_size + 1)
        return Vocabulary(vocabulary_size, table)

    return _vocabularies.get((tokenizer.fingerprint, vocabulary_size), make)


class Automaton:
    """The tokens a regular expression allows, state by state, as arrays.

    State 0 is the start. `allowed` holds, per state, a bit per token of
    the vocabulary (bit-packed, `(states, words)` int32); `transitions` is
    `(count, 3)` int32 rows `(state, token, next state)` sorted by state
    then token; `accepting` `(states,)` bool marks the states where the
    text so far matches the whole expression (and a stop token may end the
    row). `defaults` `(states,)` int32 is where a token without a
    transition of its own leads: `TO_DEAD` (the state does not allow it),
    `TO_FREE`, or a state (an automaton that waits for a trigger, see
    `keras_gen.kernels.triggers`). Built once per (pattern, tokenizer,
    vocabulary size) with outlines-core, and kept (`MAX_AUTOMATA` of them).

    Examples:
    >>> automaton = Automaton.from_regex("[0-9]{2}", tokenizer, 2048)  # doctest: +SKIP
    >>> automaton.num_states  # doctest: +SKIP
    3
    """

    def __init__(self, allowed, transitions, accepting, key=None, defaults=None):
        # What it was built from: automata with equal keys are equal.
        self.key = key
        self.allowed = allowed
        self.transitions = transitions
        self.accepting = accepting
        if defaults is None:
            defaults = np.full((len(accepting),), TO_DEAD, "int32")
        self.defaults = defaults

    @property
    def num_states(self):
        return len(self.accepting)

    @classmethod
    def from_regex(cls, pattern, tokenizer, vocabulary_size):
        """The automaton of `pattern` over `tokenizer`'s tokens.

        Args:
            pattern: a regular expression (outlines-core's syntax, that of
                Rust's `regex`) that the whole text must match.
            tokenizer: a `keras_gen.tokenizers.Tokenizer`.
            vocabulary_size: the model's vocabulary size (tokens at or
                beyond it are never allowed).

        Raises:
            ValueError: the pattern does not compile, or no text of the
                vocabulary's tokens matches it.
        """
        if not hasattr(tokenizer, "token_bytes"):
            raise TypeError(
                "Structured output needs a `keras_gen.tokenizers.Tokenizer` "
                f"(it reads the bytes of every token). Received: {tokenizer!r}"
            )
        check_regex_size(pattern)
        key = (pattern, tokenizer.fingerprint, vocabulary_size)
        return _automata.get(key, lambda: cls._build(key, tokenizer))

    @classmethod
    def _build(cls, key, tokenizer):
        pattern, _, vocabulary_size = key
        vocabulary = _vocabulary(tokenizer, vocabulary_size)
        try:
            index = Index(_anchored(pattern), vocabulary)
        except Exception as error:  # outlines-core raises plain errors
            raise ValueError(
                f"The regular expression {pattern[:200]!r} cannot be compiled "
                f"over the tokenizer's vocabulary: {error}"
            ) from None
        transitions = index.get_transitions()
        finals = set(index.get_final_states())
        before_anchor = index.get_initial_state()
        initial = transitions[before_anchor][vocabulary_size + 1]
        # Dense state numbers, the start first.
        states = set(transitions) | finals
        order = [initial] + sorted(states - {initial, before_anchor})
        number = {state: i for i, state in enumerate(order)}
        rows, allowed = [], []
        for state in order:
            moves = {
                token: target
                for token, target in transitions.get(state, {}).items()
                if token < vocabulary_size
            }
            tokens = sorted(moves)
            allowed.append(tokens)
            rows += [(number[state], token, number[moves[token]]) for token in tokens]
        return cls(
            allowed=pack_bits(allowed, vocabulary_size),
            transitions=np.asarray(rows, "int32").reshape(-1, 3),
            accepting=np.asarray([state in finals for state in order]),
            key=key,
        )
