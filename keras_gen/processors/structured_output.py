"""Structured output: each row's new tokens stay inside a regular language."""

import numpy as np
from keras import ops

from keras_gen.kernels.automaton import Automaton
from keras_gen.kernels.constraint_tables import ConstraintTables
from keras_gen.kernels.constraint_tables import allowed_tokens
from keras_gen.kernels.constraint_tables import constrain
from keras_gen.kernels.constraint_tables import next_states
from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import LogitsProcessor


class StructuredOutput(LogitsProcessor):
    """Keeps generated text inside a language: a JSON schema, a regular
    expression or a list of choices, row by row, inside the compiled loop.

    `JsonSchema`, `JsonObject`, `Regex` and `Choice` are structured outputs
    that hold one constraint for every row. `StructuredOutput(constraints)`
    gives each prompt its own: a list with one of them (or `None`, no
    constraint) per prompt.

    Each constraint becomes an automaton over the tokenizer's tokens (with
    outlines-core; built once per constraint and tokenizer, then reused).
    A call packs its rows' automata into padded tensors: per state, a
    bit-packed mask of the allowed tokens and the state each token leads
    to. In the loop every row carries its state; masking the logits and
    advancing the state are tensor ops in the step, with no host round
    trip. A stop token is allowed only where the text so far is complete;
    a row that reaches its length limit first ends with finish reason
    `"length"`. Another schema whose tables fall in the same size bucket
    reuses the compiled program.

    The constraint applies last, after the other processors: if they ban
    every token it allows, it falls back on the unprocessed logits, so a
    row never leaves its language. It needs a stop token (the tokenizer's
    end token by default) and a `keras_gen.tokenizers.Tokenizer`.

    Args:
        constraints: a list, one entry per prompt: a `StructuredOutput`
            with one constraint (`JsonSchema(...)`, `Regex(...)`, ...) or
            `None`.

    Examples:
    >>> from keras_gen.processors import Choice, JsonSchema
    >>> mixed = StructuredOutput([JsonSchema({"type": "integer"}),
    ...                           Choice(["yes", "no"]), None])
    >>> lm.generate(["Count:", "Agree?", "Anything:"],
    ...             processors=[mixed])  # doctest: +SKIP
    """

    state_key = "constraint_state"
    tunable_config = ("constraints",)
    # Its inputs are lookup tables shared by every row (and each row's
    # starting state), not one number per row.
    per_row = False
    # `None`: one constraint for every row (the subclasses). The tables are
    # set by `for_request`.
    constraints = None
    tables = None

    def __init__(self, constraints):
        if not isinstance(constraints, (list, tuple)):
            raise TypeError(
                "`constraints` must be a list with one constraint (or None) "
                f"per prompt. Received: {constraints!r}"
            )
        for constraint in constraints:
            if constraint is not None and (
                not isinstance(constraint, StructuredOutput)
                or constraint.constraints is not None
            ):
                raise TypeError(
                    "Each entry of `constraints` must be `None` or a "
                    "structured output of one constraint (JsonSchema, "
                    f"JsonObject, Regex or Choice). Received: {constraint!r}"
                )
        self.constraints = list(constraints)

    def pattern(self):
        """The regular expression every row's text must match."""
        raise NotImplementedError

    def automaton(self, tokenizer, vocabulary_size):
        """The `keras_gen.kernels.automaton.Automaton` of this constraint
        over `tokenizer`'s tokens (built once, then kept)."""
        return Automaton.from_regex(self.pattern(), tokenizer, vocabulary_size)

    def per_prompt(self, count):
        """The constraint (or `None`) of each of `count` prompts."""
        if self.constraints is None:
            return [self] * count
        if len(self.constraints) != count:
            raise ValueError(
                f"`StructuredOutput` holds {len(self.constraints)} constraints "
                f"for {count} prompts: give one (or None) per prompt."
            )
        return self.constraints

    def for_request(self, request):
        if not request.stop_token_ids:
            raise ValueError(
                "Structured output ends a row with a stop token once the "
                "text is complete: this call has none (`stop_token_ids=[]`, "
                "or a tokenizer without an end token). Give `stop_token_ids`."
            )
        vocabulary_size = request.vocabulary_size
        constraints = self.per_prompt(request.num_prompts)
        automata = [
            (
                None
                if constraint is None
                else constraint.automaton(request.tokenizer, vocabulary_size)
            )
            for constraint in constraints
        ]
        unique = {a.key: a for a in automata if a is not None}
        bound = StructuredOutput.for_tables(
            ConstraintTables(list(unique.values()), vocabulary_size), constraints
        )
        tables = bound.tables
        bound.row_states = np.asarray(
            [
                tables.start_state(automaton)
                for automaton in automata
                for _ in range(request.prompt_repeats)
            ],
            "int32",
        )
        return bound

    @classmethod
    def for_tables(cls, tables, constraints=()):
        """A structured output over packed `tables` (its program inputs,
        read as `self.<name>` inside the program). Without `row_states`, the
        rows' states are the caller's (the serving engine keeps them)."""
        bound = cls(list(constraints))
        bound.tables = tables
        for name, array in tables.arrays.items():
            setattr(bound, name, array)
        return bound

    def get_parameters(self):
        if self.tables is None:
            return {}
        names = (*self.tables.arrays, "row_states")
        return {name: getattr(self, name) for name in names if hasattr(self, name)}

    def _check_bound(self):
        if self.tables is None:
            raise ValueError(
                "A structured output runs in `CausalLM.generate` (or `stream`),"
                " which builds its automata for the model's tokenizer."
            )

    def initial_state(self, rows):
        self._check_bound()
        states = ops.cast(self.row_states, "int32")
        # Beam search runs several rows per prompt row.
        return ops.repeat(states, rows // ops.shape(states)[0], axis=0)

    def allowed_tokens(self, loop, vocabulary_size):
        """`(rows, vocab)` bool: what each row's state allows."""
        self._check_bound()
        return allowed_tokens(
            self.allowed,
            self.accepting,
            loop.processor_states[self.state_key],
            loop.stop_token_ids,
            vocabulary_size,
        )

    def process(self, logits, loop):
        allowed = self.allowed_tokens(loop, ops.shape(logits)[-1])
        return ops.where(allowed, logits, NEG_INF)

    def constrain(self, processed, logits, loop):
        # One mask for both (see `LogitsProcessor.constrain`).
        return constrain(
            processed, logits, self.allowed_tokens(loop, ops.shape(logits)[-1])
        )

    def __call__(self, logits, prompt, index, mask):
        raise TypeError(
            "A structured output reads its rows' automaton states from the "
            "loop: it runs through `process(logits, loop)`."
        )

    def advance(self, state, token, moved):
        return next_states(
            self.keys,
            self.targets,
            self.defaults,
            state,
            token,
            self.tables.vocabulary_size,
            moved,
        )

    def get_config(self):
        if self.constraints is None:  # one constraint; subclasses say which
            return {}
        return {
            "constraints": [
                None
                if c is None
                else {"class": type(c).__name__, "config": c.get_config()}
                for c in self.constraints
            ]
        }

    @classmethod
    def from_config(cls, config):
        if cls is not StructuredOutput:  # one constraint: its own arguments
            return cls(**config)
        by_name = {kind.__name__: kind for kind in kinds()}
        return cls(
            [
                None if c is None else by_name[c["class"]].from_config(c["config"])
                for c in config["constraints"]
            ]
        )


def kinds(cls=StructuredOutput):
    """Every subclass of `cls`, at any depth: the kinds of constraint."""
    for subclass in cls.__subclasses__():
        yield subclass
        yield from kinds(subclass)
