"""Automata that wait for a trigger text: every token's fate in every
waiting state, through the packed tables the compiled loop reads, against
a plain reading of the definition."""

import numpy as np
import pytest

from keras_gen.kernels.automaton import Automaton
from keras_gen.kernels.constraint_tables import DEAD
from keras_gen.kernels.constraint_tables import FREE
from keras_gen.kernels.constraint_tables import ConstraintTables
from keras_gen.kernels.triggers import triggered
from tests.kernels.constraint_tables_test import step
from tests.text_models import tiny_tokenizer

SIZE = 300
TRIGGER = "is "
# What follows the trigger. " used" runs past the trigger's end ("is" +
# " used"): allowed only when "used" is a token this regex starts with.
THEN = "(used|true|an)[a-z ]{0,20}\\."


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


class Walk:
    """One row walking an automaton through the packed tables."""

    def __init__(self, automaton, tokenizer):
        self.tables = ConstraintTables([automaton], SIZE)
        self.state = np.asarray([self.tables.start_state(automaton)], "int32")
        self.stops = np.asarray([tokenizer.eos_token_id], "int32")

    def allowed(self):
        mask, _ = step(self.tables, self.state, np.zeros(1, "int32"), self.stops)
        return set(np.flatnonzero(mask[0]).tolist())

    def take(self, token):
        assert token in self.allowed(), token
        _, self.state = step(
            self.tables, self.state, np.asarray([token], "int32"), self.stops
        )
        return int(self.state[0])


def then_start(tokenizer, pattern):
    """The tokens `pattern`'s automaton allows first, by their bytes."""
    automaton = Automaton.from_regex(pattern, tokenizer, SIZE)
    starts = {token for state, token, _ in automaton.transitions.tolist() if not state}
    return {tokenizer.token_bytes[t] for t in starts}


def expected_while_waiting(tokenizer, text, starts, required):
    """The tokens allowed after `text` (no trigger in it yet): any token
    that leaves the trigger incomplete; one that completes it when the
    bytes after the trigger are none, or a token the constraint starts
    with. Returns the set and how many tokens ran past the trigger."""
    trigger = TRIGGER.encode()
    allowed, past = set(), 0
    for token in range(SIZE):
        data = tokenizer.token_bytes[token]
        if not data:  # special: never completes the trigger
            allowed.add(token)
            continue
        joined = text + data
        at = joined.find(trigger)
        rest = b"" if at < 0 else joined[at + len(trigger) :]
        past += bool(rest)
        if at < 0 or not rest or rest in starts:
            allowed.add(token)
    if required:
        allowed.discard(tokenizer.eos_token_id)
    return allowed, past


@pytest.mark.parametrize("required", [False, True])
def test_free_text_until_the_trigger_then_the_constraint(tokenizer, required):
    then = Automaton.from_regex(THEN, tokenizer, SIZE)
    walk = Walk(triggered(TRIGGER, then, tokenizer, SIZE, required=required), tokenizer)
    starts = then_start(tokenizer, THEN)
    text, ran_past = b"", 0
    tokens = tokenizer.encode("The for statement is used for the elements.")
    for i, token in enumerate(tokens):
        if TRIGGER.encode() in text:  # the constraint holds
            break
        expected, past = expected_while_waiting(tokenizer, text, starts, required)
        assert walk.allowed() == expected, text
        ran_past += past
        walk.take(token)
        text += tokenizer.token_bytes[token]
    assert ran_past  # tokens ran past the trigger, some refused
    # After the trigger: the constraint's own tokens, and its end.
    for token in tokens[i:]:
        walk.take(token)
    assert tokenizer.eos_token_id in walk.allowed()


def test_a_special_token_restarts_the_search(tokenizer):
    then = Automaton.from_regex(THEN, tokenizer, SIZE)
    walk = Walk(triggered(TRIGGER, then, tokenizer, SIZE), tokenizer)
    eos = tokenizer.eos_token_id
    (i,) = tokenizer.encode("i")
    (s,) = tokenizer.encode("s")
    walk.take(i)
    walk.take(eos)  # no text: "i" and "s " do not meet
    walk.take(s)
    assert walk.allowed() == set(range(SIZE))  # still waiting, all free


@pytest.mark.parametrize("required", [False, True])
def test_at_the_start_after_white_space_or_free(tokenizer, required):
    then = Automaton.from_regex(THEN, tokenizer, SIZE)
    automaton = triggered(
        TRIGGER, then, tokenizer, SIZE, at_start=True, required=required
    )
    walk = Walk(automaton, tokenizer)
    for token in tokenizer.encode("  is used."):
        walk.take(token)
    assert tokenizer.eos_token_id in walk.allowed()
    walk = Walk(automaton, tokenizer)
    (the,) = tokenizer.encode("The")
    if required:  # the text must start with the trigger
        assert the not in walk.allowed()
        assert tokenizer.eos_token_id not in walk.allowed()
    else:  # a text that starts otherwise is free
        assert walk.take(the) == FREE


def test_at_the_start_or_otherwise(tokenizer):
    then = Automaton.from_regex(THEN, tokenizer, SIZE)
    otherwise = Automaton.from_regex("(The|A) class\\.", tokenizer, SIZE)
    automaton = triggered(
        TRIGGER, then, tokenizer, SIZE, at_start=True, otherwise=otherwise
    )
    trigger, starts = TRIGGER.encode(), then_start(tokenizer, THEN)
    otherwise_first = then_start(tokenizer, "(The|A) class\\.")
    expected = set()
    for token, data in enumerate(tokenizer.token_bytes[:SIZE]):
        if data and (
            trigger.startswith(data)
            or data == trigger
            or data.startswith(trigger)
            and data[len(trigger) :] in starts
            or data in otherwise_first
        ):
            expected.add(token)
    walk = Walk(automaton, tokenizer)
    assert walk.allowed() == expected
    for token in tokenizer.encode("The class."):
        walk.take(token)
    assert walk.allowed() == {tokenizer.eos_token_id}
    walk = Walk(automaton, tokenizer)
    for token in tokenizer.encode("is used for it."):
        walk.take(token)
    assert walk.allowed() == {tokenizer.eos_token_id}
    (t,) = tokenizer.encode(" t")
    walk = Walk(automaton, tokenizer)
    assert t not in walk.allowed()  # neither form starts so
    assert walk.take(tokenizer.encode("is")[0]) not in (FREE, DEAD)


def test_triggers_are_checked_and_shared(tokenizer):
    then = Automaton.from_regex(THEN, tokenizer, SIZE)
    for bad in ("", "x" * 65):
        with pytest.raises(ValueError, match="1 to 64 UTF-8 bytes"):
            triggered(bad, then, tokenizer, SIZE)
    first = triggered(TRIGGER, then, tokenizer, SIZE)
    assert triggered(TRIGGER, then, tokenizer, SIZE) is first  # built once
