"""Several automata in one set of tensors, and the two steps that use them.

Rows of one batch may follow different automata (or none): each row
carries a state number in one global numbering. State `FREE` allows every
token and stays put; state `DEAD` (a token that an automaton does not
allow, which masking prevents) allows only stop tokens. The automata's
states follow, each automaton's from its own offset. A token without a
transition of its own leads to its state's default: `DEAD`, `FREE`, or,
in an automaton that waits for a trigger, the waiting state.

In the compiled step, `allowed_tokens` turns the rows' states into a
`(rows, vocab)` mask and `next_states` advances them by the chosen tokens:
tensor ops, no host round trip. Table sizes are rounded up to powers of
two, so another set of automata of similar size reuses the program.
"""

import numpy as np
from keras import ops

from keras_gen.kernels.automaton import TO_FREE
from keras_gen.kernels.automaton import WORD_BITS
from keras_gen.kernels.automaton import words
from keras_gen.kernels.filters import token_mask
from keras_gen.utils.checks import INT32_MAX

FREE = 0
DEAD = 1
# The smallest table sizes: the buckets of states and of transitions.
MIN_STATES = 16
MIN_TRANSITIONS = 256
# Transitions are looked up by `state * vocabulary_size + token` in int32.
MAX_KEY = INT32_MAX
# The most transitions one set of tables holds (16 bytes each on device).
MAX_TRANSITIONS = 2**25


def _bucket(count, minimum):
    return max(minimum, 1 << max(count - 1, 0).bit_length())


class ConstraintTables:
    """The automata of a batch, packed into padded arrays.

    Args:
        automata: a list of `keras_gen.kernels.automaton.Automaton`s (each
            packed once, however many rows follow it).
        vocabulary_size: the model's vocabulary size.
        capacity: `None`, or `(states, transitions)`: the tables are
            exactly this large, whatever they hold (the serving engine's:
            its programs never change shape).

    Attributes:
        offsets: the global number of each automaton's start state.
        arrays: a dict of numpy arrays, the program inputs: `allowed`
            `(states, words)` int32, `accepting` `(states,)` int32, `keys`
            `(transitions,)` int32 (`state * vocabulary_size + token`,
            sorted, padded with `MAX_KEY`), `targets` `(transitions,)`
            int32 (the next state of each key) and `defaults` `(states,)`
            int32 (the next state of a token without a key).

    Raises:
        ValueError: the automata hold more states or transitions than one
            set of tables can (the message says how many).
    """

    def __init__(self, automata, vocabulary_size, capacity=None):
        self.automata = list(automata)
        self.vocabulary_size = vocabulary_size
        self.keys = [automaton.key for automaton in self.automata]
        self.offsets = []
        offset = 2
        for automaton in self.automata:
            self.offsets.append(offset)
            offset += automaton.num_states
        states, transitions = self.sizes(self.automata, vocabulary_size, capacity)
        allowed = np.zeros((states, words(vocabulary_size)), "int32")
        allowed[FREE] = -1  # every bit
        accepting = np.zeros((states,), "int32")
        accepting[[FREE, DEAD]] = 1
        defaults = np.full((states,), DEAD, "int32")
        defaults[FREE] = FREE
        keys = np.full((transitions,), MAX_KEY, "int32")
        targets = np.full((transitions,), DEAD, "int32")
        filled = 0
        for automaton, offset in zip(self.automata, self.offsets):
            end = offset + automaton.num_states
            allowed[offset:end] = automaton.allowed
            accepting[offset:end] = automaton.accepting
            local = automaton.defaults
            defaults[offset:end] = np.where(
                local >= 0,
                local + offset,
                np.where(local == TO_FREE, FREE, DEAD),
            )
            rows = automaton.transitions.astype("int64")
            stop = filled + len(rows)
            keys[filled:stop] = (rows[:, 0] + offset) * vocabulary_size + rows[:, 1]
            targets[filled:stop] = rows[:, 2] + offset
            filled = stop
        # Automata come in offset order and their rows sorted: keys are too.
        self.arrays = {
            "allowed": allowed,
            "accepting": accepting,
            "keys": keys,
            "targets": targets,
            "defaults": defaults,
        }

    @staticmethod
    def sizes(automata, vocabulary_size, capacity=None):
        """`(states, transitions)`: the padded table sizes `automata` need
        (`capacity` when given, if they fit in it).

        Raises:
            ValueError: they are beyond what one set of tables holds.
        """
        needed = 2 + sum(a.num_states for a in automata)
        count = sum(len(a.transitions) for a in automata)
        if capacity is not None:
            if needed > capacity[0] or count > capacity[1]:
                raise ValueError(
                    f"The structured output constraints need {needed} states "
                    f"and {count} token transitions; the engine's tables hold "
                    f"{capacity[0]} states and {capacity[1]} transitions (see "
                    "`Engine(constraint_states=..., constraint_transitions=...)`). "
                    "Simplify the schema or send fewer different ones at once."
                )
            states, transitions = capacity
        else:
            states = _bucket(needed, MIN_STATES)
            transitions = _bucket(count, MIN_TRANSITIONS)
        if states * vocabulary_size > MAX_KEY or transitions > MAX_TRANSITIONS:
            raise ValueError(
                f"The structured output constraints need {states} states and "
                f"{transitions} token transitions over {vocabulary_size} tokens; "
                f"one batch holds at most {MAX_KEY // vocabulary_size} states and "
                f"{MAX_TRANSITIONS} transitions. Simplify the schema or send "
                "fewer different ones at once."
            )
        return states, transitions

    def start_state(self, automaton):
        """The global start state of `automaton` (`FREE` for `None`)."""
        if automaton is None:
            return FREE
        return self.offsets[self.keys.index(automaton.key)]

    def local_state(self, state):
        """`(automaton, its own state number)` of a global state, or
        `(None, state)` for `FREE` and `DEAD`."""
        for automaton, offset in zip(self.automata, self.offsets):
            if offset <= state < offset + automaton.num_states:
                return automaton, state - offset
        return None, state


def allowed_tokens(allowed, accepting, states, stop_token_ids, vocabulary_size):
    """`(rows, vocab)` bool: the tokens each row's state allows.

    Stop tokens are allowed exactly in accepting states (and always in
    `FREE` and `DEAD`), whatever the automaton says of them.
    """
    rows = ops.shape(states)[0]
    row_words = ops.take(allowed, ops.cast(states, "int32"), axis=0)
    shifts = ops.arange(WORD_BITS, dtype="int32")
    bits = ops.bitwise_and(ops.right_shift(row_words[:, :, None], shifts), 1)
    mask = ops.reshape(bits, (rows, -1))[:, :vocabulary_size] > 0
    accept = ops.take(accepting, ops.cast(states, "int32"), axis=0) > 0
    stops = token_mask(stop_token_ids, vocabulary_size)
    return ops.where(stops, accept[:, None], mask)


def constrain(processed, logits, allowed):
    """`processed` logits where `allowed`, else `-inf`; in rows where that
    leaves nothing (the other processors banned every allowed token), the
    unprocessed `logits` where `allowed`."""
    constrained = ops.where(allowed, processed, float("-inf"))
    banned = ops.all(constrained == float("-inf"), axis=-1, keepdims=True)
    return ops.where(banned, ops.where(allowed, logits, float("-inf")), constrained)


def next_states(keys, targets, defaults, states, tokens, vocabulary_size, moved=None):
    """`(rows,)` states after each row's `tokens`; rows where `moved` is
    `False` (prompt tokens, finished rows) keep theirs."""
    states = ops.cast(states, "int32")
    query = states * vocabulary_size + ops.cast(tokens, "int32")
    position = ops.cast(ops.searchsorted(keys, query), "int32")
    position = ops.minimum(position, ops.shape(keys)[0] - 1)
    found = ops.take(keys, position, axis=0) == query
    following = ops.where(
        found,
        ops.take(targets, position, axis=0),
        ops.take(defaults, states, axis=0),
    )
    if moved is None:
        return following
    return ops.where(moved, following, states)
