"""A regular expression's automaton over a vocabulary's tokens."""

import collections
import threading

import numpy as np
from outlines_core import Index
from outlines_core import Vocabulary

# Automata and vocabularies kept for reuse (least recently used dropped).
MAX_AUTOMATA = 64
MAX_VOCABULARIES = 4
# Allowed tokens are bit-packed in 32-bit words.
WORD_BITS = 32


class _Cache:
    """A small thread-safe LRU map."""

    def __init__(self, size):
        self.size = size
        self.entries = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key, make):
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key]
        value = make()
        with self.lock:
            value = self.entries.setdefault(key, value)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return value


_automata = _Cache(MAX_AUTOMATA)
_vocabularies = _Cache(MAX_VOCABULARIES)
# Patterns whose syntax was checked (a check builds a byte-level index).
_checked = _Cache(4 * MAX_AUTOMATA)


def words(vocabulary_size):
    """How many 32-bit words hold one bit per token."""
    return -(-vocabulary_size // WORD_BITS)


def pack_bits(token_lists, vocabulary_size):
    """`(len(token_lists), words)` int32: bit `t` set for each token `t`."""
    bits = np.zeros((len(token_lists), words(vocabulary_size) * WORD_BITS), bool)
    for row, tokens in enumerate(token_lists):
        bits[row, tokens] = True
    packed = np.packbits(
        bits.reshape(len(token_lists), -1, WORD_BITS), axis=-1, bitorder="little"
    )
    return packed.view("<u4")[..., 0].astype(np.uint32).view(np.int32)


def check_regex(pattern, name="pattern"):
    """Raise a `ValueError` naming `name` if outlines-core cannot compile
    `pattern` (built over single bytes: the syntax is checked, whatever
    the tokenizer)."""

    def check():
        vocabulary = _vocabularies.get(
            "bytes", lambda: Vocabulary(256, {bytes([b]): [b] for b in range(256)})
        )
        try:
            Index(pattern, vocabulary)
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


def _vocabulary(tokenizer, vocabulary_size):
    """outlines-core's `Vocabulary` of the tokenizer's non-special tokens."""

    def make():
        table = {}
        for token_id, token in enumerate(tokenizer.token_bytes[:vocabulary_size]):
            if token:  # not special, not empty
                table.setdefault(token, []).append(token_id)
        # No token of the table ends a row: stop tokens are the loop's own
        # (allowed in accepting states); this id is out of range.
        return Vocabulary(vocabulary_size, table)

    return _vocabularies.get((tokenizer.fingerprint, vocabulary_size), make)


class Automaton:
    """The tokens a regular expression allows, state by state, as arrays.

    State 0 is the start. `allowed` holds, per state, a bit per token of
    the vocabulary (bit-packed, `(states, words)` int32); `transitions` is
    `(count, 3)` int32 rows `(state, token, next state)` sorted by state
    then token; `accepting` `(states,)` bool marks the states where the
    text so far matches the whole expression (and a stop token may end the
    row). Built once per (pattern, tokenizer, vocabulary size) with
    outlines-core, and kept (`MAX_AUTOMATA` of them).

    Examples:
    >>> automaton = Automaton.from_regex("[0-9]{2}", tokenizer, 2048)  # doctest: +SKIP
    >>> automaton.num_states  # doctest: +SKIP
    3
    """

    def __init__(self, allowed, transitions, accepting, key=None):
        # What it was built from: automata with equal keys are equal.
        self.key = key
        self.allowed = allowed
        self.transitions = transitions
        self.accepting = accepting

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
        key = (pattern, tokenizer.fingerprint, vocabulary_size)
        return _automata.get(key, lambda: cls._build(key, tokenizer))

    @classmethod
    def _build(cls, key, tokenizer):
        pattern, _, vocabulary_size = key
        vocabulary = _vocabulary(tokenizer, vocabulary_size)
        try:
            index = Index(pattern, vocabulary)
        except Exception as error:  # outlines-core raises plain errors
            raise ValueError(
                f"The regular expression {pattern[:200]!r} cannot be compiled "
                f"over the tokenizer's vocabulary: {error}"
            ) from None
        transitions = index.get_transitions()
        finals = set(index.get_final_states())
        initial = index.get_initial_state()
        # Dense state numbers, the start first.
        order = [initial] + sorted((set(transitions) | finals) - {initial})
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
