"""The compiled programs of `Engine`: admit a prompt, decode a chunk.

The engine keeps one loop state for a fixed number of slots: the key/value
cache (one row per slot), each slot's token buffer and position, and each
slot's settings, `(slots, 1)` tensors that broadcast against
`(slots, vocab)` logits. Two programs run over it:

- `admit(loop, slot, token_ids, mask)` seeds slot `slot`'s cache rows with
  one prompt (one program per prompt length bucket) and touches no other
  row;
- `decode(loop, tables, cache_length)` runs the model one step for every
  slot, masking structured outputs with the automaton `tables` (or
  the first slots, over the first positions: one program per row and
  length bucket), up to `loop["until"]` steps: each running slot
  processes, samples and writes its own token at its own position.

A slot's tokens are those `CausalLM.generate` gives the same request alone:
the same processors (minimum length, biases, repetition, frequency and
presence penalties, in that order, then the structured output's mask),
temperature (below 1e-5 greedy) and
filters (min-p, top-k, top-p), and random draws keyed by the request's seed,
the row's index within the request and the position, never by the slot.
"""

from keras import ops

from keras_gen import backend
from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import count_tokens
from keras_gen.samplers.random_sampler import sample_from_logits
from keras_gen.sampling.constraint_tables import FREE
from keras_gen.sampling.constraint_tables import allowed_tokens
from keras_gen.sampling.constraint_tables import constrain
from keras_gen.sampling.constraint_tables import next_states
from keras_gen.sampling.filters import filter_logits
from keras_gen.sampling.filters import min_p_filter
from keras_gen.sampling.filters import top_k_filter
from keras_gen.utils.checks import MIN_TEMPERATURE

# Per-slot settings and their dtypes: `(slots, 1)` numbers that broadcast
# against `(slots, vocab)` logits, and per-slot vectors.
SETTINGS = {
    "temperature": "float32",
    "top_k": "int32",
    "top_p": "float32",
    "min_p": "float32",
    "repetition_penalty": "float32",
    "frequency_penalty": "float32",
    "presence_penalty": "float32",
    "top_logprobs": "int32",
}


def take_rows(x, positions):
    """`x[b, positions[b, i]]` for a `(slots, length, ...)` tensor."""
    positions = ops.cast(positions, "int32")
    if len(ops.shape(x)) == 3:
        positions = positions[..., None]
    return ops.take_along_axis(x, positions, axis=1)


def admit(backbone, loop, slot, token_ids, mask):
    """Seed slot `slot`'s cache rows from a `(1, bucket)` prompt."""
    _, prompt_state = backbone.build_state(
        token_ids, mask, cache_length=ops.shape(token_ids)[1]
    )
    zero = ops.zeros((), "int32")
    starts = (ops.cast(slot, "int32"), zero, zero, zero)
    state = tuple(
        tuple(
            backend.update_block(cache, block, starts, donate=True)
            for cache, block in zip(layer, prompt_layer)
        )
        for layer, prompt_layer in zip(loop["state"], prompt_state)
    )
    return {**loop, "state": state}


def decode(backbone, loop, tables, cache_length):
    """Step every running slot until none runs or `loop["until"]` steps.

    The settings and buffers of `loop` may cover only the first slots (a
    row bucket), and every running slot may end within the first
    `cache_length` positions (a length bucket): the program then steps
    that block of the cache alone and writes it back in place.
    """

    def cond(loop):
        return ops.logical_and(ops.any(loop["running"]), loop["step"] < loop["until"])

    cache = loop["state"]
    rows = ops.shape(loop["running"])[0]
    if (rows, cache_length) == tuple(ops.shape(cache[0][0])[::2]):
        return backend.while_loop(
            cond, lambda loop: _step(backbone, loop, tables), loop
        )
    state = tuple(tuple(x[:rows, :, :cache_length] for x in layer) for layer in cache)
    loop = backend.while_loop(
        cond, lambda loop: _step(backbone, loop, tables), {**loop, "state": state}
    )
    zero = ops.zeros((), "int32")
    state = tuple(
        tuple(
            backend.update_block(x, block, (zero,) * 4, donate=True)
            for x, block in zip(layer, rows_layer)
        )
        for layer, rows_layer in zip(cache, loop["state"])
    )
    return {**loop, "state": state}


def _step(backbone, loop, tables):
    positions, running = loop["positions"], loop["running"]
    token_ids = loop["token_ids"]
    length = ops.shape(token_ids)[1]
    # Each slot runs its last token at its own position.
    last = take_rows(token_ids, (positions - 1)[:, None])
    logits, _, state = backbone.call_with_state(last, loop["state"], positions - 1)
    logits = ops.cast(logits[:, 0], "float32")
    scores = _tempered(_processed(logits, loop, tables), loop)
    token = _choose(scores, loop)
    log_probs = ops.log_softmax(scores, axis=-1)
    chosen = ops.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]
    count = ops.shape(loop["top_log_probs"])[2]

    def top(log_probs):
        values, token_ids = ops.top_k(log_probs, count)
        return values, ops.cast(token_ids, "int32")

    def no_top(log_probs):
        rows = ops.shape(log_probs)[0]
        return ops.zeros((rows, count), "float32"), ops.zeros((rows, count), "int32")

    top_log_probs, top_token_ids = backend.cond(
        _any_running(loop, loop["top_logprobs"][:, 0] > 0), top, no_top, log_probs
    )
    # Stopped and free slots write what they hold: nothing changes for them.
    at = ops.minimum(positions, length - 1)

    def write(buffer, value):
        value = ops.cast(value, buffer.dtype)
        held = take_rows(buffer, at[:, None])[:, 0]
        mask = ops.reshape(running, (-1,) + (1,) * (len(ops.shape(value)) - 1))
        return backend.update_rows(
            buffer, ops.where(mask, value, held)[:, None], at, axis=1
        )

    is_stop = ops.any(token[:, None] == loop["stop_token_ids"], axis=-1)
    finished = ops.logical_or(is_stop, positions + 1 >= loop["ends"])
    return {
        **loop,
        "constraint_states": next_states(
            tables["keys"],
            tables["targets"],
            loop["constraint_states"],
            token,
            ops.shape(logits)[-1],
            moved=running,
        ),
        "state": state,
        "token_ids": write(token_ids, token),
        "log_probs": write(loop["log_probs"], chosen),
        "top_log_probs": write(loop["top_log_probs"], top_log_probs),
        "top_token_ids": write(loop["top_token_ids"], top_token_ids),
        "positions": positions + ops.cast(running, "int32"),
        "running": ops.logical_and(running, ops.logical_not(finished)),
        "step": loop["step"] + 1,
    }


def _any_running(loop, wanted):
    """Whether a running slot wants something: `(slots,)` bool `wanted`.

    The costly parts of a step (sorting for top-k and top-p, drawing,
    counting tokens for penalties, the top alternatives) run under
    `backend.cond` on this, and their neutral settings change nothing, so
    a slot's tokens do not depend on whether its neighbours asked for them.
    """
    return ops.any(ops.logical_and(loop["running"], wanted))


def _processed(logits, loop, tables):
    """The logits processors of every slot, with its own settings.

    As `MinLength`, `LogitBias`, `RepetitionPenalty`, `FrequencyPenalty`
    and `PresencePenalty` in that order (neutral settings change nothing),
    and, as `Sampler.process_logits`, a row left with no allowed token
    falls back on its unprocessed logits.
    """
    positions, prompt_lengths = loop["positions"], loop["prompt_lengths"]
    vocabulary_size = ops.shape(logits)[-1]
    # No stop token before `min_new_tokens`.
    short = positions - prompt_lengths < loop["min_new_tokens"]

    def without_stops(logits, stop_token_ids):
        ones = ops.ones_like(stop_token_ids, "float32")
        stops = count_tokens(stop_token_ids, ones, vocabulary_size)
        return ops.where(ops.logical_and(short[:, None], stops > 0), NEG_INF, logits)

    processed = backend.cond(
        _any_running(loop, short),
        without_stops,
        lambda logits, stop_token_ids: logits,
        logits,
        loop["stop_token_ids"],
    )
    processed = processed + loop["logit_bias"]
    penalized = ops.logical_or(
        loop["repetition_penalty"] != 1,
        ops.logical_or(loop["frequency_penalty"] != 0, loop["presence_penalty"] != 0),
    )[:, 0]
    processed = backend.cond(
        _any_running(loop, penalized),
        _penalized,
        lambda processed, *settings: processed,
        processed,
        loop["token_ids"],
        positions,
        prompt_lengths,
        loop["repetition_penalty"],
        loop["frequency_penalty"],
        loop["presence_penalty"],
    )
    banned = ops.all(processed == NEG_INF, axis=-1, keepdims=True)
    processed = ops.where(banned, logits, processed)
    return backend.cond(
        _any_running(loop, loop["constraint_states"] != FREE),
        _constrained,
        lambda processed, logits, *tables: processed,
        processed,
        logits,
        loop["constraint_states"],
        loop["stop_token_ids"],
        tables["allowed"],
        tables["accepting"],
    )


def _constrained(processed, logits, states, stop_token_ids, allowed, accepting):
    """Each slot's structured output mask, as `StructuredOutput` applies
    it: after the other processors, falling back on the masked
    unprocessed logits where they leave nothing."""
    vocabulary_size = ops.shape(logits)[-1]
    mask = allowed_tokens(allowed, accepting, states, stop_token_ids, vocabulary_size)
    return constrain(processed, logits, mask)


def _penalized(
    processed, token_ids, positions, prompt_lengths, repetition, frequency, presence
):
    """The repetition, frequency and presence penalties of every slot."""
    length = ops.shape(token_ids)[1]
    vocabulary_size = ops.shape(processed)[-1]
    columns = ops.arange(length, dtype="int32")[None, :]
    seen = columns < positions[:, None]
    generated = ops.logical_and(seen, columns >= prompt_lengths[:, None])
    repeated = count_tokens(token_ids, ops.cast(seen, "float32"), vocabulary_size) > 0
    penalized = ops.where(processed < 0, processed * repetition, processed / repetition)
    processed = ops.where(repeated, penalized, processed)
    counts = count_tokens(token_ids, ops.cast(generated, "float32"), vocabulary_size)
    processed = processed - counts * frequency
    return processed - ops.cast(counts > 0, "float32") * presence


def _tempered(scores, loop):
    """Scores divided by each slot's temperature (1 for greedy slots)."""
    temperature = loop["temperature"]
    greedy = temperature < MIN_TEMPERATURE
    return scores / ops.where(greedy, 1.0, temperature)


def _choose(scores, loop):
    """`(slots,)` tokens: argmax for greedy slots, a filtered draw else."""
    greedy = loop["temperature"][:, 0] < MIN_TEMPERATURE
    best = ops.cast(ops.argmax(scores, axis=-1), "int32")
    positions = loop["positions"]
    seeds = loop["seeds"] + ops.stack([ops.zeros_like(positions), positions], axis=1)
    sampled = ops.logical_not(greedy)
    top_p_rows = _any_running(loop, ops.logical_and(sampled, loop["top_p"][:, 0] < 1))
    top_k_rows = _any_running(loop, ops.logical_and(sampled, loop["top_k"][:, 0] > 0))
    vocabulary_size = ops.shape(scores)[-1]

    def top_k_only(scores, top_k, top_p):
        # No sort: top-p is neutral for every running row.
        return backend.cond(
            top_k_rows,
            lambda s, k: top_k_filter(s, ops.where(k > 0, k, vocabulary_size)),
            lambda s, k: s,
            scores,
            top_k,
        )

    def draw(scores, top_k, top_p, min_p, seeds):
        # As `filter_logits`: min-p first, then top-k and top-p (one sort).
        scores = backend.cond(
            top_p_rows,
            lambda s, k, p: filter_logits(s, top_k=k, top_p=p),
            top_k_only,
            min_p_filter(scores, min_p),
            top_k,
            top_p,
        )
        return ops.cast(sample_from_logits(scores, seeds), "int32")

    drawn = backend.cond(
        _any_running(loop, ops.logical_not(greedy)),
        draw,
        lambda scores, *settings: best,
        scores,
        loop["top_k"],
        loop["top_p"],
        loop["min_p"],
        seeds,
    )
    return ops.where(greedy, best, drawn)
