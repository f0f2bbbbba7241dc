"""Automata whose constraint waits for a trigger text.

A tool call opens with its template's marker (`<tool_call>`,
`[TOOL_CALLS]`), an answer follows the model's thinking (`</think>`): the
text before the trigger is free, what follows it is constrained. The
waiting states watch the text for the trigger's bytes (the states of a
string search, one per trigger byte matched so far) while allowing every
token; a token that completes the trigger leads into the constraint's
automaton.

A token may end past the trigger: its remaining bytes must be one token
that the constraint allows at its start, which it then takes (`{"` after
a `{` trigger), or the token is not allowed (the model writes the trigger
in other tokens). Special tokens have no text: they never complete a
trigger (a trigger is text the reply shows).
"""

import numpy as np

from keras_gen.kernels.automaton import TO_DEAD
from keras_gen.kernels.automaton import TO_FREE
from keras_gen.kernels.automaton import Automaton
from keras_gen.kernels.automaton import cached
from keras_gen.kernels.automaton import pack_mask
from keras_gen.utils.lru_cache import LRUCache

# The longest trigger, in UTF-8 bytes (each byte is a waiting state).
MAX_TRIGGER_BYTES = 64
# White space a trigger at the start may follow.
SPACE = b" \t\r\n"

# Per (trigger, at start, tokenizer, vocabulary size): what each token does
# in each waiting state (the search over every token's bytes, ~0.5 s for
# 150,000 tokens), shared by every constraint that waits for it.
_searches = LRUCache(16)


def _search(trigger, at_start, skip_space, token_bytes):
    """Per waiting state `k` (the trigger's first `k` bytes matched), a
    dict `{token: outcome}` for the tokens that do not lead to the
    default: `("partial", j)`, `j` bytes matched after the token, or
    `("complete", rest)`, the trigger complete with bytes `rest` after it.

    The default is the start state (a search) or "missed" (at the start;
    with `skip_space`, white space before the trigger stays in state 0).
    """
    n = len(trigger)
    by_first = {}
    for token, data in enumerate(token_bytes):
        if data:
            by_first.setdefault(data[0], []).append(token)

    if at_start:

        def outcome(k, data):
            text = trigger[:k] + data
            if k == 0 and skip_space:
                text = text.lstrip(SPACE)
                if not text:
                    return ("partial", 0)
            if text.startswith(trigger):
                return ("complete", text[n:])
            if trigger.startswith(text):
                return ("partial", len(text))
            return None

        # At the start, white space and the trigger's first byte; later,
        # tokens that go on with the trigger's next byte.
        found = []
        for k in range(n):
            firsts = {trigger[k]} | (set(SPACE) if k == 0 and skip_space else set())
            table = {}
            for first in firsts:
                for token in by_first.get(first, ()):
                    result = outcome(k, token_bytes[token])
                    if result is not None:
                        table[token] = result
            found.append(table)
        return found

    # The lengths `j` a text ending in byte `b` may match of the trigger.
    ends = {}
    for j in range(n - 1, 0, -1):
        ends.setdefault(trigger[j - 1], []).append(j)

    def outcome(text):
        position = text.find(trigger)
        if position >= 0:
            return ("complete", text[position + n :])
        for j in ends.get(text[-1], ()):
            if text.endswith(trigger[:j]):
                return ("partial", j)
        return None

    first = {}
    for token, data in enumerate(token_bytes):
        if data:
            result = outcome(data)
            if result is not None:
                first[token] = result
    # After `k` matched bytes a token's outcome differs from the start's
    # only when a match reaches into those bytes: the token continues a
    # part of the trigger, or begins with an end of it.
    overlapping = set()
    for i in range(1, n):
        for token in by_first.get(trigger[i], ()):
            data = token_bytes[token]
            if trigger[i:].startswith(data) or data.startswith(trigger[i:]):
                overlapping.add(token)
    found = [first]
    for k in range(1, n):
        table = dict(first)
        for token in overlapping:
            result = outcome(trigger[:k] + token_bytes[token])
            if result is None:
                table.pop(token, None)
            else:
                table[token] = result
        found.append(table)
    return found


def _unpack(packed, vocabulary_size):
    """The `(vocab,)` bool mask of one state's bit-packed row."""
    bits = np.unpackbits(packed.view(np.uint8), bitorder="little")
    return bits[:vocabulary_size].astype(bool)


def _shifted(automaton, offset):
    """`automaton`'s transitions and defaults, its states from `offset`."""
    transitions = automaton.transitions.copy()
    transitions[:, [0, 2]] += offset
    defaults = np.where(
        automaton.defaults >= 0, automaton.defaults + offset, automaton.defaults
    )
    return transitions, defaults


def triggered(
    trigger,
    then,
    tokenizer,
    vocabulary_size,
    at_start=False,
    required=False,
    otherwise=None,
):
    """An automaton that follows `then` once the text holds `trigger`.

    Args:
        trigger: the text that starts the constraint (not part of `then`'s
            language: `then` reads what follows it).
        then: the `Automaton` of the text after the trigger.
        tokenizer: a `keras_gen.tokenizers.Tokenizer`.
        vocabulary_size: the model's vocabulary size.
        at_start: `False`: the trigger may come anywhere, after any text.
            `True`: the text starts with it (after white space when
            `otherwise` is `None`), or else follows `otherwise`.
        required: the text may not end before the trigger (with
            `at_start` and no `otherwise`: it must start with it).
        otherwise: with `at_start`, the `Automaton` a text that does not
            start with the trigger follows; `None`: such a text is free
            (or, when `required`, not allowed).

    Raises:
        ValueError: the trigger is empty or longer than 64 bytes.
    """
    data = trigger.encode() if isinstance(trigger, str) else b""
    if not 0 < len(data) <= MAX_TRIGGER_BYTES:
        raise ValueError(
            f"A trigger must be text of 1 to {MAX_TRIGGER_BYTES} UTF-8 bytes. "
            f"Received: {trigger!r:.200}"
        )
    key = (
        "triggered",
        trigger,
        at_start,
        required,
        then.key,
        None if otherwise is None else otherwise.key,
    )
    return cached(
        key,
        lambda: _build(
            key, data, then, tokenizer, vocabulary_size, at_start, required, otherwise
        ),
    )


def _build(
    key, trigger, then, tokenizer, vocabulary_size, at_start, required, otherwise
):
    n = len(trigger)
    token_bytes = list(tokenizer.token_bytes[:vocabulary_size])
    token_bytes += [None] * (vocabulary_size - len(token_bytes))
    skip_space = at_start and otherwise is None
    tables = _searches.get(
        (trigger, at_start, skip_space, tokenizer.fingerprint, vocabulary_size),
        lambda: _search(trigger, at_start, skip_space, token_bytes),
    )
    then_start = {
        int(token): int(target)
        for state, token, target in then.transitions.tolist()
        if state == 0
    }
    by_bytes = {}
    for token, data in enumerate(token_bytes):
        if data and token in then_start:
            by_bytes.setdefault(data, token)
    then_offset = n
    other_offset = n + then.num_states
    masks = np.zeros((n, vocabulary_size), bool)
    defaults = np.full((n,), TO_DEAD, "int32")
    accepting = np.zeros((n,), bool)
    rows = []
    for k in range(n):
        moves = {}
        if not at_start:
            masks[k] = True
            defaults[k] = 0
            accepting[k] = not required
        elif otherwise is None:
            masks[k] = not required
            defaults[k] = TO_DEAD if required else TO_FREE
            accepting[k] = not required
        elif k == 0:
            masks[k] = _unpack(otherwise.allowed[0], vocabulary_size)
            default = otherwise.defaults[0]
            defaults[k] = default + other_offset if default >= 0 else default
            accepting[k] = otherwise.accepting[0]
            for state, token, target in otherwise.transitions.tolist():
                if state == 0:
                    moves[token] = target + other_offset
        for token, (kind, value) in tables[k].items():
            if kind == "partial":
                target = value
            elif not value:
                target = then_offset
            elif by_bytes.get(value) is not None:
                target = then_offset + then_start[by_bytes[value]]
            elif token in moves:  # what `otherwise` does with it
                continue
            else:  # the token runs past the trigger into what `then` refuses
                masks[k, token] = False
                continue
            masks[k, token] = True
            moves[token] = target
        rows += [(k, token, moves[token]) for token in sorted(moves)]
    parts = [then] if otherwise is None else [then, otherwise]
    transitions = [np.asarray(rows, "int32").reshape(-1, 3)]
    all_defaults = [defaults]
    for part, offset in zip(parts, (then_offset, other_offset)):
        shifted, part_defaults = _shifted(part, offset)
        transitions.append(shifted)
        all_defaults.append(part_defaults)
    allowed = np.concatenate([pack_mask(masks)] + [p.allowed for p in parts])
    return Automaton(
        allowed=allowed,
        transitions=np.concatenate(transitions).astype("int32"),
        accepting=np.concatenate([accepting] + [p.accepting for p in parts]),
        key=key,
        defaults=np.concatenate(all_defaults).astype("int32"),
    )
