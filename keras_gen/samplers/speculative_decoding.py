"""Speculative decoding: a draft proposes tokens, the target verifies them."""

import collections
import copy

from keras import ops

from keras_gen import backend
from keras_gen.kernels import rows as rows_lib
from keras_gen.kernels import stopping
from keras_gen.samplers.greedy_sampler import GreedySampler
from keras_gen.samplers.random_sampler import sample_from_logits
from keras_gen.samplers.sampler import Sampler
from keras_gen.samplers.sampler import log_prob_outputs
from keras_gen.samplers.sampler import optional_entry
from keras_gen.utils import checks
from keras_gen.utils.checks import MAX_NGRAM_SIZE
from keras_gen.utils.checks import MAX_SPECULATIVE_TOKENS

# The default of `num_speculative_tokens`.
SPECULATIVE_TOKENS = 4
# The random draws of a row's speculative step, each keyed apart: the
# draft's tokens, the acceptance tests, the redraw at a rejection.
DRAFT_DRAW = 0
ACCEPT_DRAW = MAX_SPECULATIVE_TOKENS
REDRAW = 2 * MAX_SPECULATIVE_TOKENS
DRAWS_PER_STEP = REDRAW + 1
# Per-row counts the host reads: `lengths`, how far each row got, and the
# acceptance counts.
ROW_COUNTS = ("lengths", "accepted_tokens", "draft_tokens")


class SpeculativeState(
    collections.namedtuple(
        "SpeculativeState",
        (
            "lengths",
            "accepted_tokens",
            "draft_tokens",
            "draft_state",
            "limits",
            "ngrams",
        ),
    )
):
    """Speculative decoding's own loop state: each row's length (rows
    advance by different counts), its acceptance counts, the draft
    model's cache (`()` for prompt lookup), and per row the most drafts it
    may keep (`limits`, 0 for a row that does not speculate) and its
    prompt-lookup n-gram size (`ngrams`, at most the sampler's
    `prompt_lookup_ngram`). `generate` gives every row the same; the
    serving engine's slots each their request's."""


def running_rows(loop):
    """`(batch,)` bool: the rows of a speculative loop still generating."""
    lengths = loop.sampler_state.lengths
    return ops.logical_and(ops.logical_not(loop.done), lengths < loop.end)


def take_rows(x, positions):
    """`x[b, positions[b, i]]`: per-row reads of a `(batch, length)` tensor."""
    return ops.take_along_axis(x, ops.cast(positions, "int32"), axis=1)


def leading_count(accepted):
    """`(batch,)` int32: how many leading entries of each row are `True`."""
    run = ops.cumprod(ops.cast(accepted, "int32"), axis=1)
    return ops.sum(run, axis=1)


def prompt_lookup(token_ids, lengths, ngram, num_tokens, ngrams=None):
    """Draft `num_tokens` per row by matching the row's last `ngram` tokens.

    The latest earlier occurrence of the last `ngram` tokens (before
    `lengths`) is found, and the tokens that followed it are proposed;
    where they run into the row's end they repeat with the period of the
    match, as the row would if it kept repeating. `(batch, length)`
    buffer, `(batch,)` lengths, `ngram` a Python int: the comparison is
    unrolled. `ngrams`, `(batch,)` int32 at most `ngram`, gives each row
    its own size instead.

    Returns the `(batch, num_tokens)` drafts and `(batch,)` bool: whether
    the row found a match (a row without one proposes its last token).
    """
    batch, length = ops.shape(token_ids)
    if ngrams is None:
        ngrams = ops.full((batch,), ngram, "int32")
    starts = ops.arange(length, dtype="int32")[None, :]  # candidate s
    padded = ops.concatenate([token_ids, ops.full((batch, ngram), -1, "int32")], axis=1)
    match = starts + ngrams[:, None] <= (lengths - 1)[:, None]
    for t in range(ngram):
        last = take_rows(token_ids, ops.maximum(lengths - ngrams + t, 0)[:, None])
        equal = ops.logical_or(padded[:, t : t + length] == last, t >= ngrams[:, None])
        match = ops.logical_and(match, equal)
    # `amax`: keras' torch `ops.max` breaks a fullgraph compile.
    start = ops.amax(ops.where(match, starts, -1), axis=1)
    follow = ops.where(start >= 0, start + ngrams, lengths - 1)  # (batch,)
    period = lengths - follow
    offsets = ops.arange(num_tokens, dtype="int32")[None, :]
    positions = follow[:, None] + offsets % period[:, None]
    return take_rows(token_ids, positions), start >= 0


def lookup_proposes(token_ids, lengths, running, limits, ngrams, ngram):
    """`(batch,)` bool: the rows that prompt lookup drafts for at `lengths`:
    `running`, speculating (`limits` above 0) and with an earlier match of
    their last `ngrams` tokens (at most `ngram`). The serving engine steps
    plainly while no row does."""
    _, found = prompt_lookup(token_ids, lengths, ngram, 1, ngrams)
    return ops.logical_and(ops.logical_and(running, limits > 0), found)


class Speculation(
    collections.namedtuple(
        "Speculation", ("draft", "num_speculative_tokens", "prompt_lookup_ngram")
    )
):
    """How a model speculates: a draft `Backbone` or a prompt-lookup n-gram
    (or neither), and the tokens proposed per step."""

    @property
    def enabled(self):
        return self.draft is not None or self.prompt_lookup_ngram is not None

    def override(self, call, config):
        """This (`compile`'s) speculation as a call's changes it, falling
        back on a `GenerationConfig`'s options."""
        if call.enabled:
            draft, ngram = call.draft, call.prompt_lookup_ngram
        elif self.enabled:
            draft, ngram = self.draft, self.prompt_lookup_ngram
        else:
            draft, ngram = None, config.prompt_lookup_ngram
        count = (
            call.num_speculative_tokens
            or self.num_speculative_tokens
            or config.num_speculative_tokens
        )
        if call.num_speculative_tokens is not None and draft is None and ngram is None:
            raise ValueError(
                "`num_speculative_tokens` needs `draft_model` or `prompt_lookup_ngram`."
            )
        return Speculation(draft, count, ngram)

    def sampler(self, sampler, target):
        """The `SpeculativeSampler` of this speculation around `sampler`
        (or around the sampler a speculative one wraps)."""
        if isinstance(sampler, SpeculativeSampler):
            sampler = sampler.sampler
        return SpeculativeSampler(
            sampler,
            target,
            self.num_speculative_tokens or SPECULATIVE_TOKENS,
            draft=self.draft,
            prompt_lookup_ngram=self.prompt_lookup_ngram,
        )

    def check(self, target):
        """Raise if this speculation cannot run for the `target` backbone."""
        if self.draft is not None and self.prompt_lookup_ngram is not None:
            raise ValueError(
                "Give exactly one of `draft_model` and `prompt_lookup_ngram`."
            )
        draft = self.draft
        if draft is not None and draft.vocabulary_size != target.vocabulary_size:
            raise ValueError(
                "The draft model's vocabulary must be the target's. Received "
                f"a draft vocabulary of {draft.vocabulary_size} tokens for a "
                f"target of {target.vocabulary_size}."
            )


class SpeculativeSampler(Sampler):
    """Speculative decoding around a sampler that picks one token per row.

    Each step a draft proposes `num_speculative_tokens` tokens per row: a
    smaller model that shares the target's vocabulary, or prompt lookup
    (the tokens that followed the latest earlier occurrence of the row's
    last `prompt_lookup_ngram` tokens). The target scores all proposals in
    one call and each row keeps its longest accepted run plus one token of
    its own, so a step yields 1 to `num_speculative_tokens + 1` tokens per
    row, and every row advances its cache by its own count.

    With greedy sampling a proposal is accepted when it is the target's
    argmax, so the output is that of plain greedy decoding. With sampling
    (random, top-k, top-p, min-p, any temperature and processors) draft
    tokens are drawn from the draft's distribution under the same
    processors, temperature and filter, accepted with probability
    `min(1, p / q)`, and a rejected one is redrawn from the normalised
    positive part of `p - q` (Leviathan et al., 2023; Chen et al., 2023):
    the tokens follow the target's distribution exactly.

    `CausalLM` builds it from `compile(draft_model=..., ...)` or
    `generate(draft_model=..., ...)`; it is not registered by name.

    Args:
        sampler: the `Sampler` whose distribution is kept: greedy, random,
            top-k, top-p or min-p (a sampler that overrides the loop step,
            such as beam search, is refused).
        target: the `Backbone` that verifies.
        num_speculative_tokens: int >= 1, tokens proposed per step.
        draft: the draft `Backbone`, or `None` with `prompt_lookup_ngram`.
        prompt_lookup_ngram: int >= 1, or `None` with a `draft`.

    Examples:
    >>> from keras_gen.models import GPT2Backbone
    >>> backbone = GPT2Backbone(
    ...     vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=64)
    >>> sampler = SpeculativeSampler(
    ...     GreedySampler(), backbone, 3, prompt_lookup_ngram=2)
    >>> sampler.lookahead
    4
    """

    def __init__(
        self,
        sampler,
        target,
        num_speculative_tokens=4,
        draft=None,
        prompt_lookup_ngram=None,
    ):
        if type(sampler).step is not Sampler.step or (
            type(sampler).get_next_token is Sampler.get_next_token
        ):
            raise ValueError(
                "Speculative decoding works with samplers that pick one "
                "token per row from logits (greedy, random, top_k, top_p, "
                f"min_p). {type(sampler).__name__} has its own loop step."
            )
        if draft is None and prompt_lookup_ngram is None:
            raise ValueError(
                "Give exactly one of `draft_model` and `prompt_lookup_ngram`."
            )
        Speculation(draft, num_speculative_tokens, prompt_lookup_ngram).check(target)
        self.sampler = sampler
        self.target = target
        self.draft = draft
        self.num_speculative_tokens = checks.check_int(
            "num_speculative_tokens", num_speculative_tokens, 1, MAX_SPECULATIVE_TOKENS
        )
        self.prompt_lookup_ngram = checks.check_int(
            "prompt_lookup_ngram",
            prompt_lookup_ngram,
            1,
            MAX_NGRAM_SIZE,
            allow_none=True,
        )
        self.greedy = isinstance(sampler, GreedySampler)
        # Buffers and caches are this much wider than the token buffer: a
        # verify step near a row's end writes up to `lookahead` positions
        # past it (and never keeps them).
        self.lookahead = self.num_speculative_tokens + 1

    def with_parameters(self, parameters, rows=None):
        # The wrapped sampler owns the numbers; the models are shared.
        bound = copy.copy(self)
        bound.sampler = self.sampler.with_parameters(parameters, rows)
        return bound

    @property
    def speculation(self):
        return Speculation(
            self.draft, self.num_speculative_tokens, self.prompt_lookup_ngram
        )

    def get_structure(self):
        # The draft's weights are variables of the program: the draft
        # itself (not a copy with equal settings) is part of its structure.
        return (
            type(self),
            self.sampler.get_structure(),
            self.speculation,
        )

    # The wrapped sampler owns the tunable numbers and the default seed.
    @property
    def seed(self):
        return self.sampler.seed

    @property
    def deterministic(self):
        return self.sampler.deterministic

    @property
    def temperature(self):
        return self.sampler.temperature

    def get_parameters(self):
        return self.sampler.get_parameters()

    def start(self, prompt, state, index, mask=None, *args, **kwargs):
        """The base loop state, widened by `lookahead`, with per-row
        `lengths` (each row starts at its own prompt length), acceptance
        counts, and `index` counting steps."""
        loop = super().start(prompt, state, index, mask, *args, **kwargs)
        batch = ops.shape(loop.token_ids)[0]
        extra = self.lookahead

        def widen(x):
            padding = ops.zeros((batch, extra) + tuple(ops.shape(x)[2:]), x.dtype)
            return ops.concatenate([x, padding], axis=1)

        return loop._replace(
            token_ids=widen(loop.token_ids),
            mask=widen(loop.mask),
            outputs={k: widen(v) for k, v in loop.outputs.items()},
            index=ops.convert_to_tensor(0, "int32"),
            sampler_state=SpeculativeState(
                lengths=ops.sum(ops.cast(loop.mask, "int32"), axis=1),
                # Two tensors, not one: torch.compile guards on aliasing.
                accepted_tokens=ops.zeros((batch,), "int32"),
                draft_tokens=ops.zeros((batch,), "int32"),
                draft_state=(),
                limits=ops.full((batch,), self.num_speculative_tokens, "int32"),
                ngrams=ops.full((batch,), self.prompt_lookup_ngram or 0, "int32"),
            ),
        )

    @property
    def model_variables(self):
        return () if self.draft is None else self.draft.variables

    def prefill(self, loop, prompt, mask):
        """Seed the draft model's cache from the prompt."""
        if self.draft is None:
            return loop
        cache_length = ops.shape(loop.token_ids)[1]
        _, draft_state = self.draft.build_state(prompt, mask, cache_length=cache_length)
        return loop._replace(
            sampler_state=loop.sampler_state._replace(draft_state=draft_state)
        )

    def row_counts(self, loop):
        # `lengths` tells the host how far each row got.
        counts = loop.sampler_state._asdict()
        return {name: counts[name] for name in ROW_COUNTS}

    def cond(self, loop):
        return ops.logical_and(ops.any(running_rows(loop)), loop.index < loop.until)

    def _seed(self, loop, slot):
        """`(batch, 2)` keys of draw `slot` of a row's step (`DRAFT_DRAW + j`,
        `ACCEPT_DRAW + j`, `REDRAW`): keyed by the row's length, which no two
        of its steps share (so a row draws the same whatever steps or chunks
        led there, and however many tokens the step proposes past its
        own), and apart from the keys of plain steps (`rows.step_seeds`:
        first entry unchanged)."""
        offset = loop.sampler_state.lengths * DRAWS_PER_STEP + slot
        return loop.seed + ops.stack([ops.ones_like(offset), offset], axis=1)

    def _greedy_rows(self):
        """`(batch,)` bool, or a Python bool for every row: rows that take
        their most likely token (a temperature of 0, the serving engine's
        greedy requests)."""
        if self.greedy:
            return True
        temperature = self.sampler.temperature
        if isinstance(temperature, (int, float)):
            return temperature == 0
        return ops.reshape(temperature == 0, (-1,))

    def _scores(self, logits, loop, token_ids, positions):
        """Processed, tempered `(batch, vocab)` scores for per-row
        `positions` (rows at temperature 0 untempered); stateful
        processors read their states from `loop`."""
        logits = ops.cast(logits, "float32")
        row_loop = loop._replace(token_ids=token_ids, index=positions)
        temperature = self.sampler.temperature
        if not isinstance(temperature, (int, float)):
            temperature = ops.where(temperature == 0, 1.0, temperature)
        return self.process_logits(logits, row_loop) / temperature

    def _draw(self, scores, seed):
        """A token and the `(batch, vocab)` probabilities it was drawn from
        (the most likely token for greedy rows)."""
        most_likely = ops.cast(ops.argmax(scores, axis=-1), "int32")
        if self.greedy:
            return most_likely, None
        filtered = self.sampler.filter_logits(scores)
        token = ops.cast(sample_from_logits(filtered, seed), "int32")
        greedy = self._greedy_rows()
        if greedy is not False:
            token = ops.where(greedy, most_likely, token)
        return token, ops.softmax(filtered, axis=-1)

    def _propose(self, loop):
        """Draft tokens `(batch, K)`, their probabilities `(batch, K, vocab)`
        (`None` for greedy), the buffer holding them, the draft state and
        how many of them each row may keep (prompt lookup: none where it
        found no match, so that such a row steps as plain decoding does)."""
        lengths, token_ids = loop.sampler_state.lengths, loop.token_ids
        draft_state = loop.sampler_state.draft_state
        limits = loop.sampler_state.limits
        count = self.num_speculative_tokens
        if self.draft is None:
            drafts, found = prompt_lookup(
                token_ids,
                lengths,
                self.prompt_lookup_ngram,
                count,
                loop.sampler_state.ngrams,
            )
            token_ids = backend.update_rows(token_ids, drafts, lengths, axis=1)
            probabilities = None
            if not self.greedy:
                vocabulary_size = self.target.vocabulary_size
                probabilities = ops.one_hot(drafts, vocabulary_size)
            limits = ops.where(found, limits, 0)
            return drafts, probabilities, token_ids, draft_state, limits
        # Re-run the token before last too: after a step that accepted every
        # proposal, the draft has not seen the last one.
        first = ops.maximum(lengths - 2, 0)
        pair = take_rows(token_ids, first[:, None] + ops.arange(2, dtype="int32"))
        logits, _, state = self.draft.call_with_state(pair, draft_state, first)
        logits = ops.take_along_axis(
            logits, (lengths - 1 - first)[:, None, None], axis=1
        )[:, 0]
        drafts, probabilities = [], []
        states = loop.processor_states
        # A row that does not run (a serving slot waiting for the rest of
        # its prefill) drafts the tokens its buffer holds: the draft's cache
        # rows keep its prompt's values.
        running = running_rows(loop)
        for j in range(count):
            position = lengths + j
            scores = self._scores(
                logits, loop._replace(processor_states=states), token_ids, position
            )
            token, probs = self._draw(scores, self._seed(loop, DRAFT_DRAW + j))
            held = take_rows(loop.token_ids, position[:, None])[:, 0]
            token = ops.where(running, token, held)
            states = self.advance_processors(states, token)
            token_ids = backend.update_rows(token_ids, token[:, None], position, 1)
            drafts.append(token)
            probabilities.append(probs)
            if j + 1 < count:
                logits, _, state = self.draft.call_with_state(
                    token[:, None], state, position
                )
                logits = logits[:, 0]
        probabilities = None if self.greedy else ops.stack(probabilities, axis=1)
        return ops.stack(drafts, axis=1), probabilities, token_ids, state, limits

    def _accept(self, loop, drafts, draft_probabilities, scores, limits):
        """`(accepted count (batch,), new tokens (batch, count + 1))` for
        `(batch, count)` drafts: the accepted drafts (at most each row's
        limit), then the target's own token: at a rejected draft, a draw
        from what the draft left; after the row's last allowed draft, the
        draw a plain step makes there."""
        count = ops.shape(drafts)[1]
        choices = ops.cast(ops.argmax(scores, axis=-1), "int32")  # (b, count+1)
        accepted = ops.minimum(leading_count(drafts == choices[:, :count]), limits)
        if not self.greedy:
            accepted, redrawn = self._accept_sampled(
                loop, drafts, draft_probabilities, scores, limits, accepted
            )
        correction = take_rows(choices, accepted[:, None])[:, 0]
        if not self.greedy:
            # Past the last allowed draft: the plain step's draw.
            at = ops.take_along_axis(scores, accepted[:, None, None], 1)[:, 0]
            positions = loop.sampler_state.lengths + accepted
            fresh = self.sampler.get_next_token(
                at, rows_lib.step_seeds(loop.seed, positions)
            )
            sampled = ops.where(accepted < limits, redrawn, fresh)
            correction = ops.where(
                self._greedy_rows(), correction, ops.cast(sampled, "int32")
            )
        slots = ops.arange(count + 1, dtype="int32")[None, :]
        # Not `ops.pad`: on torch it names a Keras object, which recompiles.
        drafts = ops.concatenate([drafts, ops.zeros_like(choices[:, :1])], axis=1)
        correction = ops.cast(correction, "int32")[:, None]
        return accepted, ops.where(slots == accepted[:, None], correction, drafts)

    def _accept_sampled(
        self, loop, drafts, draft_probabilities, scores, limits, accepted
    ):
        """Sampled rows' acceptance: each draft kept with probability
        `min(1, p / q)`; `(accepted (batch,), the redraw at a reject from
        the positive part of p - q)` (the greedy rows keep `accepted`)."""
        count = ops.shape(drafts)[1]
        # Filters take (batch, vocab), with each row's own numbers.
        filtered = [self.sampler.filter_logits(scores[:, j]) for j in range(count + 1)]
        probabilities = ops.softmax(ops.stack(filtered, axis=1), axis=-1)
        p = ops.take_along_axis(probabilities[:, :count], drafts[..., None], -1)
        q = ops.take_along_axis(draft_probabilities, drafts[..., None], -1)
        batch = ops.shape(drafts)[0]
        uniform = ops.stack(
            [
                backend.uniform((batch,), self._seed(loop, ACCEPT_DRAW + j))
                for j in range(count)
            ],
            axis=1,
        )
        sampled = leading_count(uniform * q[..., 0] < p[..., 0])
        accepted = ops.where(
            self._greedy_rows(), accepted, ops.minimum(sampled, limits)
        )
        residual = ops.maximum(probabilities[:, :count] - draft_probabilities, 0)
        at = ops.minimum(accepted, count - 1)[:, None, None]
        chosen = ops.take_along_axis(residual, at, 1)[:, 0]
        fallback = ops.take_along_axis(probabilities, at, 1)[:, 0]
        empty = ops.sum(chosen, axis=-1, keepdims=True) <= 0
        chosen = ops.where(empty, fallback, chosen)
        return accepted, sample_from_logits(ops.log(chosen), self._seed(loop, REDRAW))

    def step(self, next, loop):
        """Propose, verify in one target call, keep each row's accepted run."""
        count = self.num_speculative_tokens
        drafts, draft_probabilities, token_ids, draft_state, limits = self._propose(
            loop
        )
        lengths = loop.sampler_state.lengths
        running = running_rows(loop)
        offsets = ops.arange(count + 1, dtype="int32")[None, :]
        # A row that does not run verifies, and keeps, the tokens its buffer
        # holds: the serving engine's slots that wait for the rest of their
        # prompt's prefill stand in the step, and the cache rows it rewrites
        # must keep their prompt's values.
        held = take_rows(loop.token_ids, lengths[:, None] + offsets)
        drafts = ops.where(running[:, None], drafts, held[:, :count])
        token_ids = backend.update_rows(token_ids, drafts, lengths, axis=1)
        # Tokens at lengths - 1 ... lengths + K - 1 give the target's logits
        # for lengths ... lengths + K.
        verify = take_rows(token_ids, (lengths - 1)[:, None] + offsets)
        logits, hidden_states, state = self.target.call_with_state(
            verify, loop.state, lengths - 1
        )
        logits = ops.cast(logits, "float32")
        # Stateful processors (structured output) score each position in
        # the state the drafts before it lead to: a draft that leaves the
        # language has probability 0 and is rejected.
        states = [loop.processor_states]
        for j in range(count):
            states.append(self.advance_processors(states[-1], drafts[:, j]))
        scores = ops.stack(
            [
                self._scores(
                    logits[:, j],
                    loop._replace(processor_states=states[j]),
                    token_ids,
                    lengths + j,
                )
                for j in range(count + 1)
            ],
            axis=1,
        )
        accepted, tokens = self._accept(
            loop, drafts, draft_probabilities, scores, limits
        )
        tokens = ops.where(running[:, None], tokens, held)
        token_ids = backend.update_rows(token_ids, tokens, lengths, axis=1)
        kept = ops.minimum(accepted + 1, loop.end - lengths)
        kept, stopped = self._stop(loop, token_ids, tokens, kept)
        kept = ops.where(running, kept, 0)
        # Proposals that could be kept: none past the row's last position.
        counts = loop.sampler_state
        usable = ops.clip(loop.end - lengths - 1, 0, limits)
        usable = ops.where(running, usable, 0)
        loop = self._record(
            loop,
            tokens,
            kept,
            logits=logits,
            scores=scores,
            hidden_states=hidden_states,
        )
        return loop._replace(
            processor_states=self._kept_states(states, tokens, accepted, kept),
            token_ids=token_ids,
            state=state,
            index=loop.index + 1,
            done=ops.logical_or(loop.done, ops.logical_and(running, stopped)),
            sampler_state=counts._replace(
                lengths=lengths + kept,
                accepted_tokens=counts.accepted_tokens
                + ops.minimum(ops.minimum(accepted, kept), usable),
                draft_tokens=counts.draft_tokens + usable,
                draft_state=draft_state,
            ),
        )

    def _kept_states(self, states, tokens, accepted, kept):
        """The stateful processors' states after each row's `kept` of its
        new `(batch, K + 1)` tokens, from `states`, the states after
        0..K drafts: the tokens before `accepted` are drafts, the one at
        `accepted` the target's own."""
        if not states[0]:
            return states[0]
        at = ops.minimum(kept, accepted)
        reached = {}
        for key in states[0]:
            stacked = ops.stack([s[key] for s in states], axis=1)
            index = ops.reshape(at, (-1,) + (1,) * (len(ops.shape(stacked)) - 1))
            reached[key] = ops.take_along_axis(stacked, index, axis=1)[:, 0]
        own = take_rows(tokens, accepted[:, None])[:, 0]
        return self.advance_processors(reached, own, kept > accepted)

    def _stop(self, loop, token_ids, tokens, kept):
        """Cut each row's `kept` new tokens after its first stop."""
        lengths = loop.sampler_state.lengths
        slots = ops.arange(ops.shape(tokens)[1], dtype="int32")[None, :]
        # Stop ids for every row `(k,)`, or each row's `(rows, k)`.
        stop_ids = loop.stop_token_ids
        stop_ids = ops.reshape(stop_ids, (-1, 1, ops.shape(stop_ids)[-1]))
        is_stop = ops.any(tokens[..., None] == stop_ids, axis=-1)
        if loop.stop_sequences:
            matches = [
                stopping.stop_match(token_ids, lengths + j, loop.stop_sequences)
                for j in range(ops.shape(tokens)[1])
            ]
            is_stop = ops.logical_or(is_stop, ops.stack(matches, axis=1))
        is_stop = ops.logical_and(is_stop, slots < kept[:, None])
        stopped = ops.any(is_stop, axis=1)
        first = ops.cast(ops.argmax(ops.cast(is_stop, "int32"), axis=1), "int32")
        return ops.where(stopped, first + 1, kept), stopped

    def _record(self, loop, tokens, kept, **values):
        """Write the requested per-step outputs of each row's `kept` new
        positions (a buffer narrower than the positions is a ring, as in
        `Sampler.record`)."""
        outputs = loop.outputs
        if not outputs:
            return loop
        values.update(
            log_prob_outputs(
                values["scores"], tokens, outputs, optional_entry(loop.top_rows)
            )
        )
        lengths = loop.sampler_state.lengths
        for j in range(ops.shape(tokens)[1]):
            outputs = {
                name: rows_lib.write(
                    buffer,
                    values[name][:, j],
                    (lengths + j) % ops.shape(buffer)[1],
                    keep=j >= kept,
                )
                for name, buffer in outputs.items()
            }
        return loop._replace(outputs=outputs)

    def finish(self, loop):
        """The `(batch, max_length)` token ids; zeros past each row's end."""
        token_ids = loop.token_ids[:, : -self.lookahead]
        positions = ops.arange(ops.shape(token_ids)[1], dtype="int32")[None, :]
        return ops.where(positions < loop.sampler_state.lengths[:, None], token_ids, 0)

    def get_config(self):
        raise NotImplementedError(
            "A SpeculativeSampler is built by `CausalLM.compile(draft_model=...)`"
            " and is not serialized; serialize its `sampler`."
        )
