"""Automata over a vocabulary: built in time that follows their size."""

import json
import subprocess
import sys

import pytest

from keras_gen.kernels.automaton import Automaton
from keras_gen.kernels.automaton import check_regex
from keras_gen.kernels.automaton import regex_size
from tests.text_models import tiny_tokenizer

# A child process under a memory limit (4 GiB of address space) builds
# the automata: a build that runs away is killed (a timeout, an abort)
# instead of taking the suite.
BUILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from keras_gen.kernels.automaton import Automaton
from keras_gen.kernels.json_schema import schema_regex
from tests.text_models import tiny_tokenizer
tokenizer = tiny_tokenizer()
for kind, value in json.loads(sys.argv[1]):
    pattern = schema_regex(value) if kind == "schema" else value
    print(Automaton.from_regex(pattern, tokenizer, 300).num_states, flush=True)
"""


def build_in_child(constraints, timeout=120):
    """The state counts of `constraints`' automata, `(kind, value)` pairs
    (`"schema"` or `"regex"`), built in one child process."""
    done = subprocess.run(
        [sys.executable, "-c", BUILD, json.dumps(constraints)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [int(line) for line in done.stdout.split()]


@pytest.mark.parametrize("max_length", [30, 250])
def test_a_string_whose_first_character_recurs_in_it_builds_at_once(max_length):
    # `"(?:[^"\\]|\\"){0,n}"`: outlines-core's unanchored search DFA took
    # time exponential in `n` (30: over 300 s); the anchor keeps it linear.
    schema = {"type": "string", "maxLength": max_length}
    assert build_in_child([("schema", schema)], timeout=60)[0] > max_length


def test_the_anchor_changes_nothing_the_automaton_allows():
    tokenizer = tiny_tokenizer()
    automaton = Automaton.from_regex('"(a|\\\\")*"', tokenizer, 300)
    text = '"a\\"a"'
    state = 0
    moves = {(s, t): n for s, t, n in automaton.transitions.tolist()}
    for token in tokenizer.encode(text):
        state = moves[(state, token)]
    assert automaton.accepting[state] and not automaton.accepting[0]


@pytest.mark.parametrize("pattern", ["(", "a)", "(a|b", "a)|(b", "((a)"])
def test_unbalanced_parentheses_are_refused_by_name(pattern):
    # Built behind the anchor, `a)|(b` would otherwise change its meaning.
    with pytest.raises(ValueError, match="`pattern`.*unbalanced"):
        check_regex(pattern)


def test_escaped_and_class_parentheses_are_characters():
    assert regex_size(r"\(a\)[)(]")[0] == 4
    assert check_regex(r"\((a|b)\)") == r"\((a|b)\)"
