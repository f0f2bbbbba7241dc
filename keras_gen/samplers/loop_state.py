"""The state a sampler's loop carries from step to step."""

import collections


class LoopState(
    collections.namedtuple(
        "LoopState",
        (
            "token_ids",
            "mask",
            "state",
            "index",
            "end",
            "until",
            "done",
            "stop_token_ids",
            "seed",
            "outputs",
            "stop_sequences",
            "parameters",
            "processor_parameters",
            "processor_rows",
            "processor_states",
            "top_rows",
            "sampler_state",
        ),
        # Optional entries are empty tuples: a nested structure every
        # backend's loop takes.
        defaults=((), (), (), (), (), (), ()),
    )
):
    """A generation loop's state: tensors of fixed shapes, and nested
    structures of them, that every backend's tree utilities walk (a named
    tuple).

    Attributes:
        token_ids: `(rows, length)` int32, the token buffer: prompts, and
            the generated tokens at their positions.
        mask: `(rows, length)` bool, `True` at prompt tokens.
        state: the model's cache (or `()`).
        index: int32, the position the next step generates: a scalar
            (`generate`: every row together) or `(rows,)` (the serving
            engine: each slot at its own).
        end: `(rows,)` int32, where each row stops at the latest.
        until: like `index`: a chunk of steps runs while `index < until`.
        done: `(rows,)` bool, rows that stopped.
        stop_token_ids: `(k,)` int32 ids that end every row, or `(rows, k)`
            each row's; -1 pads.
        seed: `(rows, 2)` int32, each row's random key.
        outputs: a dict of per-step output buffers by name (`"log_probs"`,
            `"scores"`, ...), `(rows, width, ...)`, written at each step's
            position (modulo `width`).
        stop_sequences: `()` or the stop tables of
            `keras_gen.kernels.stopping`.
        parameters: the sampler's tunable numbers (tensors by name).
        processor_parameters: one dict of tunable numbers per processor.
        processor_rows: `()`, or one `(rows,)` bool per processor: the rows
            it applies to (the serving engine's lanes).
        processor_states: stateful processors' per-row states, by their
            `state_key`.
        top_rows: `()`, or `(rows,)` bool: the rows that ask for top
            alternatives (the others need none computed).
        sampler_state: a sampler's own entries (beam search's hypotheses,
            speculative decoding's lengths and draft cache), `()` for none.
    """
