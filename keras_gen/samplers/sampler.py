"""The base sampler: the generation loop that every sampler shares."""

from keras import ops

from keras_gen import backend
from keras_gen.kernels import rows as rows_lib
from keras_gen.kernels import stopping
from keras_gen.samplers.loop_state import LoopState
from keras_gen.utils.checks import check_temperature
from keras_gen.utils.tunable import Tunable

# Row `r` of a batch draws its random numbers from the key
# `(seed, r * ROW_STRIDE + position)`: they depend on the seed, the row and
# the position only, not on the other rows.
ROW_STRIDE = 1 << 20


def row_seeds(seed, batch):
    """`(batch, 2)` int32 per-row keys from a `(2,)` seed."""
    seed = ops.convert_to_tensor(seed, "int32")
    rows = ops.arange(batch, dtype="int32") * ROW_STRIDE
    return seed[None, :] + ops.stack([ops.zeros_like(rows), rows], axis=1)


def log_prob_outputs(scores, token, outputs, top_rows=None):
    """The log-prob outputs among `outputs` for `(..., vocab)` scores and
    the chosen `(...)` tokens: `log_probs`, and the alternatives
    `top_token_ids` and `top_log_probs` (as many as the buffer holds),
    found only when a row of `top_rows` (`(rows,)` bool) asks, if given."""
    if not {"log_probs", "top_log_probs"} & set(outputs):
        return {}
    log_probs = ops.log_softmax(scores, axis=-1)
    chosen = ops.cast(token, "int32")[..., None]
    values = {"log_probs": ops.take_along_axis(log_probs, chosen, axis=-1)[..., 0]}
    if "top_log_probs" in outputs:
        count = ops.shape(outputs["top_log_probs"])[-1]

        def top(log_probs):
            values, token_ids = ops.top_k(log_probs, count)
            return values, ops.cast(token_ids, "int32")

        def none(log_probs):
            shape = (*ops.shape(log_probs)[:-1], count)
            return ops.zeros(shape, "float32"), ops.zeros(shape, "int32")

        if top_rows is None:
            found = top(log_probs)
        else:
            found = backend.cond(ops.any(top_rows), top, none, log_probs)
        values["top_log_probs"], values["top_token_ids"] = found
    return values


def optional_entry(value):
    """An optional loop entry: `None` where it is absent (`()`)."""
    return None if isinstance(value, tuple) and not value else value


class Sampler(Tunable):
    """Base class for samplers: turns logits into tokens, step by step.

    The base class owns the generation loop. A sampler that picks one token
    per row from `(batch, vocab)` logits only writes `get_next_token`; the
    loop divides the logits by `temperature` before calling it. Samplers that
    need more (beam search, contrastive search) override `start`, `step` and
    `finish`, not the loop.

    The numbers a user tunes (`temperature`, `k`, `p`, ...) are listed in
    `get_parameters()`. They reach the compiled program as tensors, so
    changing them between calls never recompiles it, and inside it each is
    a `(rows, 1)` column (see `keras_gen.utils.tunable.Tunable`): the
    serving engine runs one sampler over rows with different settings. A
    row whose temperature is 0 (the engine's greedy requests) takes its
    most likely token.

    Args:
        temperature: finite float >= 1e-5 (lower ones overflow the logits;
            decode greedily instead). Logits are divided by it before
            sampling.
        seed: int or `None`. The default seed of `CausalLM.generate`.

    Call arguments:
        next: `next(prompt, state, index) -> (logits, hidden_states, state)`,
            the model's step: logits `(batch, vocab)` for position `index`.
        prompt: `(batch, max_length)` int tensor, the token buffer.
        state: the model's cache state, or `None`.
        index: int or scalar tensor, the first position to generate.
        mask: `(batch, max_length)` bool tensor, `True` where `prompt` holds
            tokens to keep. Defaults to positions before `index`.
        stop_token_ids: ids that end a row, or `None`.
        hidden_states: the prompt's hidden states (for samplers that use
            them).
        processors: `keras_gen.processors.LogitsProcessor`s applied in
            order to each step's logits, before `temperature`.
        stop_sequences: a list of token id lists; a row also stops when its
            tokens end with one of them.

    Examples:
    >>> import keras
    >>> class ArgmaxSampler(Sampler):
    ...     def get_next_token(self, logits, seed):
    ...         return keras.ops.argmax(logits, axis=-1)
    """

    # Logits processors applied by `process_logits`, bound to their numbers
    # (see `bound`).
    processors = ()
    # The default seed reaches the program as an input: not structure.
    tunable_config = ("seed",)
    # Sequences returned per prompt.
    num_return_sequences = 1
    # Whether the same prompt always gives the same tokens (no draws).
    deterministic = False
    # Positions past the token buffer a step may write (and the cache must
    # hold): speculative decoding verifies a few ahead.
    lookahead = 0
    # Variables of models the sampler runs besides the target (a
    # speculative draft's): the program reads them too.
    model_variables = ()

    def __init__(self, temperature=1.0, seed=None):
        self.temperature = temperature
        self.seed = seed
        self.get_parameters()

    @property
    def first_step_from_prompt(self):
        """Whether the first step may use the prompt's own logits.

        Then `CausalLM` runs the first step with a `next` that returns the
        logits seeding the cache already computed, instead of running the
        last prompt token again. True for the base `step`, which calls
        `next` once on the loop's rows as they are; a sampler that
        overrides `step` opts in by overriding this.
        """
        return type(self).step is Sampler.step

    def get_parameters(self):
        """The tunable numbers, checked, as a dict of Python numbers."""
        return {"temperature": check_temperature("temperature", self.temperature)}

    def get_next_token(self, logits, seed):
        """Pick `(batch,)` token ids from `(batch, vocab)` float32 logits.

        `seed` is a `(batch, 2)` int32 tensor, one key per row, different
        at every step; pass it to `keras_gen.backend.uniform` for random
        draws (row `b` draws from `seed[b]`).
        """
        raise NotImplementedError

    def filter_logits(self, logits):
        """The logits a sampling `get_next_token` draws from: `-inf` where a
        token is cut (top-k, top-p, min-p). Speculative decoding reads the
        filtered distribution through this; by default nothing is cut.
        """
        return logits

    def start(
        self,
        prompt,
        state,
        index,
        mask=None,
        stop_token_ids=None,
        hidden_states=None,
        end=None,
        seed=None,
        outputs=None,
        stop_sequences=None,
    ):
        """The `LoopState` before the first step.

        `end` is where each row stops at the latest: a scalar or `(batch,)`
        int tensor, by default the width of `prompt`. `seed` is a `(2,)`
        int tensor. `outputs` maps names of per-step outputs (`"logits"`,
        `"scores"`, `"log_probs"`, `"hidden_states"`) to zero buffers of
        shape `(batch, max_length, ...)` that the loop fills.
        `stop_sequences` is `None` or a dict of fixed-shape
        tensors (see `keras_gen.samplers.stopping.stop_match`): a row also
        stops when its tokens end with one of them.
        """
        prompt = ops.convert_to_tensor(prompt, "int32")
        batch, length = ops.shape(prompt)
        index = ops.convert_to_tensor(index, "int32")
        if mask is None:
            mask = ops.arange(length, dtype="int32")[None, :] < index
            mask = ops.broadcast_to(mask, (batch, length))
        end = ops.broadcast_to(
            ops.convert_to_tensor(length if end is None else end, "int32"),
            (batch,),
        )
        if stop_sequences is not None:
            stop_sequences = {
                name: ops.convert_to_tensor(value)
                for name, value in stop_sequences.items()
            }
        return LoopState(
            token_ids=prompt,
            mask=ops.convert_to_tensor(mask, "bool"),
            # An empty tuple, not None: every loop carries a nested structure.
            state=() if state is None else state,
            index=index,
            end=end,
            # A stream runs the loop in chunks, up to `until` at a time.
            until=ops.max(end),
            done=ops.zeros((batch,), dtype="bool"),
            stop_token_ids=ops.convert_to_tensor(
                [-1] if stop_token_ids is None else stop_token_ids, "int32"
            ),
            # One key per row (see `row_seeds`).
            seed=row_seeds([0, 0] if seed is None else seed, batch),
            outputs=outputs or {},
            stop_sequences=() if stop_sequences is None else stop_sequences,
            processor_states={},
        )

    def prefill(self, loop, prompt, mask):
        """`loop` with any state the sampler seeds from the `(batch,
        prefill)` prompt (speculative decoding: the draft's cache)."""
        return loop

    def cond(self, loop):
        """Keep going while a row is unfinished and short of its `end` and
        of `until`."""
        index = loop.index
        running = ops.logical_and(ops.logical_not(loop.done), index < loop.end)
        return ops.any(ops.logical_and(running, index < loop.until))

    def step(self, next, loop):
        """Generate one token per row at `loop.index` (a scalar, or one
        position per row)."""
        index = loop.index
        logits, hidden_states, state = next(loop.token_ids, loop.state, index)
        logits = ops.cast(logits, "float32")
        processed = self.process_logits(logits, loop)
        token, scores = self.choose(
            processed, rows_lib.step_seeds(loop.seed, index), loop
        )
        loop = self.record(
            loop, token, logits=logits, scores=scores, hidden_states=hidden_states
        )
        return self.append(loop, token, state)

    def choose(self, processed, seed, loop):
        """`(tokens (rows,), scores)`: the scores are the processed logits
        over the temperature; rows at temperature 0 take their argmax, the
        others `get_next_token` (not run when no running row samples)."""
        greedy = ops.reshape(self.temperature == 0, (-1,))
        scores = processed / ops.where(self.temperature == 0, 1.0, self.temperature)
        best = ops.cast(ops.argmax(scores, axis=-1), "int32")
        sampled = ops.logical_and(ops.logical_not(greedy), ops.logical_not(loop.done))
        token = backend.cond(
            ops.any(sampled),
            lambda scores, seed, best: ops.cast(
                self.get_next_token(scores, seed), "int32"
            ),
            lambda scores, seed, best: best,
            scores,
            seed,
            best,
        )
        return ops.where(greedy, best, token), scores

    def record(self, loop, token, **values):
        """Write the requested per-step outputs at `index`.

        `values` holds `(batch, ...)` tensors by output name; `log_probs`
        is derived from `scores` and the chosen `token` when requested,
        and the top alternatives only when a row of `loop.top_rows`
        asks, where the loop says. A buffer narrower than the positions is
        a ring: position `i` lands at `i % width` (the serving engine reads
        its outputs after every chunk of steps).
        """
        if not loop.outputs:
            return loop
        values.update(
            log_prob_outputs(
                values["scores"], token, loop.outputs, optional_entry(loop.top_rows)
            )
        )
        outputs = {
            name: rows_lib.write(
                buffer, values[name], loop.index % ops.shape(buffer)[1], loop.done
            )
            for name, buffer in loop.outputs.items()
        }
        return loop._replace(outputs=outputs)

    def process_logits(self, logits, loop):
        """Apply the logits processors, in order, to `(batch, vocab)` logits.

        Steps that override `step` call this before their temperature. A row
        that the processors leave with no finite logit (all banned) falls
        back to its unprocessed logits rather than sampling from NaN.
        Stateful processors (structured output) apply last, each falling
        back on its own mask of the unprocessed logits: a row never leaves
        its language.

        With `loop.processor_rows` (one `(rows,)` bool per processor,
        the serving engine's), each processor changes only the rows it
        holds for, and runs only when a running row needs it.
        """
        if not self.processors:
            return logits
        selected = loop.processor_rows or (None,) * len(self.processors)
        running = ops.logical_not(loop.done)

        def apply(processor, rows, processed, unprocessed):
            if processor.state_key is None:
                result = lambda x, _: processor.process(x, loop)  # noqa: E731
            else:
                result = lambda x, y: processor.constrain(x, y, loop)  # noqa: E731
            if rows is None:
                return result(processed, unprocessed)

            def only_rows(x, y):
                return ops.where(rows[:, None], result(x, y), x)

            return backend.cond(
                ops.any(ops.logical_and(rows, running)),
                only_rows,
                lambda x, y: x,
                processed,
                unprocessed,
            )

        processed = logits
        for processor, rows in zip(self.processors, selected):
            if processor.state_key is None:
                processed = apply(processor, rows, processed, logits)
        banned = ops.all(processed == float("-inf"), axis=-1, keepdims=True)
        processed = ops.where(banned, logits, processed)
        for processor, rows in zip(self.processors, selected):
            if processor.state_key is not None:
                processed = apply(processor, rows, processed, logits)
        return processed

    def start_processors(self, loop):
        """`loop` with each stateful processor's initial per-row state."""
        rows = ops.shape(loop.token_ids)[0]
        states = {
            p.state_key: p.initial_state(rows)
            for p in self.processors
            if p.state_key is not None
        }
        return loop._replace(processor_states=states)

    def advance_processors(self, states, token, moved=None):
        """The stateful processors' states (`states` by key, as
        `loop.processor_states`) after each row's `token`."""
        return {
            p.state_key: p.advance(states[p.state_key], token, moved)
            for p in self.processors
            if p.state_key is not None
        }

    def bound(self, parameters, processors=(), processor_parameters=None, rows=None):
        """A copy of this sampler that reads `parameters` (its tunable
        numbers, tensors) and applies `processors`, each a copy bound to
        its entry of `processor_parameters` (by default their own values).

        The program makes it while tracing from its inputs; the objects a
        caller holds are never changed. With `rows`, each number is
        repeated per row (see `Tunable.with_parameters`).
        """
        processors = tuple(processors or ())
        if processor_parameters is None:
            processor_parameters = [p.get_parameter_tensors() for p in processors]
        sampler = self.with_parameters(parameters, rows)
        sampler.processors = tuple(
            p.with_parameters(values, rows)
            for p, values in zip(processors, processor_parameters)
        )
        return sampler

    def append(self, loop, token, state):
        """Write `token` at `index` (keeping prompt tokens) and advance.

        A row is done after a stop (a stop token, sequence or string) or
        at its `end`. With one position per row, done rows stand still.
        """
        index, done = loop.index, loop.done
        token_ids, mask = loop.token_ids, loop.mask
        in_prompt = rows_lib.read(mask, index)
        token = ops.where(
            in_prompt, rows_lib.read(token_ids, index), ops.cast(token, "int32")
        )
        is_stop = ops.any(token[:, None] == loop.stop_token_ids, axis=-1)
        token_ids = rows_lib.write(token_ids, token, index, done)
        if loop.stop_sequences:
            is_stop = ops.logical_or(
                is_stop, stopping.stop_match(token_ids, index, loop.stop_sequences)
            )
        stopped = ops.logical_or(
            ops.logical_and(ops.logical_not(in_prompt), is_stop),
            index + 1 >= loop.end,
        )
        moved = ops.logical_and(ops.logical_not(in_prompt), ops.logical_not(done))
        return loop._replace(
            processor_states=self.advance_processors(
                loop.processor_states, token, moved
            ),
            token_ids=token_ids,
            state=state,
            index=rows_lib.advance(index, ops.logical_not(done)),
            done=ops.logical_or(done, stopped),
        )

    def run(self, next, loop):
        """Step until `cond` fails: one loop inside the compiled program."""
        return backend.while_loop(self.cond, lambda loop: self.step(next, loop), loop)

    def row_counts(self, loop):
        """Per-row counts the host reads beside the tokens: a dict of
        `(rows,)` tensors (speculative decoding: how far each row got, and
        its acceptance counts)."""
        return {}

    def stream_view(self, loop):
        """What a stream may hand out so far: `(view, limits)`.

        `view` is what `finish` returns (token ids, or a dict of them and
        more) with one row per returned sequence; `limits` is how many
        positions of each row are final (one int for all rows here: the
        loop's `index`). Host side, between compiled chunks.
        """
        return loop.token_ids, int(ops.convert_to_numpy(loop.index))

    def finish(self, loop):
        """The generated `(batch, max_length)` token ids."""
        return loop.token_ids

    def __call__(
        self,
        next,
        prompt,
        state=None,
        index=0,
        mask=None,
        stop_token_ids=None,
        hidden_states=None,
        processors=None,
        stop_sequences=None,
    ):
        if stop_sequences is not None:
            stop_sequences = stopping.sequence_tensors(stop_sequences)
        loop = self.start(
            prompt,
            state,
            index,
            mask,
            stop_token_ids,
            hidden_states,
            stop_sequences=stop_sequences,
        )
        rows = ops.shape(loop.token_ids)[0]
        sampler = self.bound(self.get_parameter_tensors(), processors, rows=rows)
        return sampler.finish(sampler.run(next, sampler.start_processors(loop)))

    def get_config(self):
        return {"temperature": self.temperature, "seed": self.seed}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
