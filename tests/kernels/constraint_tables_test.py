"""Automata packed into tensors: the masks and moves outlines-core gives."""

import numpy as np
import pytest
from keras import ops
from outlines_core import Index
from outlines_core import Vocabulary

from keras_gen.kernels import constraint_tables
from keras_gen.kernels.automaton import Automaton
from keras_gen.kernels.constraint_tables import DEAD
from keras_gen.kernels.constraint_tables import FREE
from keras_gen.kernels.constraint_tables import ConstraintTables
from keras_gen.kernels.constraint_tables import allowed_tokens
from keras_gen.kernels.constraint_tables import next_states
from tests.text_models import tiny_tokenizer

PATTERNS = [r"\{\"a\": [0-9]{1,3}\}", r"(yes|no|maybe)", r"[a-z ]{2,9}\."]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def step(tables, states, tokens, stops):
    arrays = {k: ops.convert_to_tensor(v) for k, v in tables.arrays.items()}
    size = tables.vocabulary_size
    mask = allowed_tokens(
        arrays["allowed"],
        arrays["accepting"],
        ops.convert_to_tensor(states),
        ops.convert_to_tensor(stops),
        size,
    )
    following = next_states(
        arrays["keys"],
        arrays["targets"],
        arrays["defaults"],
        ops.convert_to_tensor(states),
        ops.convert_to_tensor(tokens),
        size,
    )
    return ops.convert_to_numpy(mask), ops.convert_to_numpy(following)


def test_random_walks_follow_outlines_core(tokenizer):
    # Every row of a batch walks its own automaton (or none), and the
    # tables' masks and moves are those of outlines-core's own index.
    size = 300
    eos = tokenizer.eos_token_id
    table = {}
    for token_id, token in enumerate(tokenizer.token_bytes):
        if token:
            table.setdefault(token, []).append(token_id)
    vocabulary = Vocabulary(eos, table)
    indexes = [Index(p, vocabulary) for p in PATTERNS]
    automata = [Automaton.from_regex(p, tokenizer, size) for p in PATTERNS]
    tables = ConstraintTables(automata, size)
    rng = np.random.default_rng(0)
    rows = [0, 1, 2, 0, None]  # the last row is free
    states = np.asarray(
        [tables.start_state(automata[r]) if r is not None else FREE for r in rows],
        "int32",
    )
    reference = [
        indexes[r].get_initial_state() if r is not None else None for r in rows
    ]
    stops = np.asarray([eos, -1], "int32")
    for _ in range(12):
        mask, _ = step(tables, states, np.zeros(len(rows), "int32"), stops)
        tokens = []
        for b, r in enumerate(rows):
            if r is None:
                assert mask[b].all()
                tokens.append(int(rng.integers(size)))
                continue
            expected = set(indexes[r].get_allowed_tokens(reference[b]) or [])
            final = indexes[r].is_final_state(reference[b])
            assert set(np.flatnonzero(mask[b])) - {eos} == expected - {eos}
            assert mask[b, eos] == final
            choices = sorted(expected - {eos})
            token = int(rng.choice(choices)) if choices else eos
            tokens.append(token)
            if token != eos:
                reference[b] = indexes[r].get_next_state(reference[b], token)
        _, states = step(tables, states, np.asarray(tokens, "int32"), stops)
        for b, r in enumerate(rows):
            if r is not None and tokens[b] != eos:
                automaton, local = tables.local_state(int(states[b]))
                assert automaton is automata[r] and local >= 0


def test_free_and_dead_states_and_per_row_stop_tokens(tokenizer):
    automaton = Automaton.from_regex("(ab|cd)", tokenizer, 300)
    tables = ConstraintTables([automaton], 300)
    start = tables.start_state(automaton)
    disallowed = next(
        t
        for t in range(300)
        if not tokenizer.token_bytes[t]
        or tokenizer.token_bytes[t][:1] not in (b"a", b"c")
    )
    stops = np.asarray([[5, -1], [7, 9], [-1, -1]], "int32")
    states = np.asarray([start, FREE, DEAD], "int32")
    mask, following = step(tables, states, np.asarray([disallowed, 3, 4]), stops)
    # A token the automaton does not allow leads to DEAD; FREE stays FREE.
    assert following.tolist() == [DEAD, FREE, DEAD]
    assert not mask[0, 5]  # not accepting: no stop token
    assert mask[1].all()
    assert np.flatnonzero(mask[2]).tolist() == []  # DEAD, no stop ids here
    mask, _ = step(tables, np.asarray([DEAD] * 3, "int32"), np.zeros(3, "int32"), stops)
    assert np.flatnonzero(mask[1]).tolist() == [7, 9]


def test_tables_are_padded_to_buckets_and_bounded(tokenizer, monkeypatch):
    small = ConstraintTables([Automaton.from_regex("(yes|no)", tokenizer, 300)], 300)
    other = ConstraintTables([Automaton.from_regex("(up|down)", tokenizer, 300)], 300)
    shapes = [{k: v.shape for k, v in t.arrays.items()} for t in (small, other)]
    assert shapes[0] == shapes[1]
    assert shapes[0]["allowed"] == (constraint_tables.MIN_STATES, 10)  # 300 bits
    monkeypatch.setattr(constraint_tables, "MAX_TRANSITIONS", 64)
    big = Automaton.from_regex("[a-z]{1,30}", tokenizer, 300)
    with pytest.raises(ValueError, match="at most .* 64 transitions"):
        ConstraintTables([big], 300)
