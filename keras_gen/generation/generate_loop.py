"""The generate program: seed the cache from the prompt, then the sampler's
loop; and the host loop of a stream, a compiled chunk at a time.

`lm` is a `CausalLM` (its `backbone` and its one-step `next`); `sampler`
and `processors` are the program's structure, and their numbers are
program inputs (`inputs["sampler"]`, `inputs["processors"]`), bound to
copies of them while the program is traced (see `bind`).
"""

import time

from keras import ops

from keras_gen import backend
from keras_gen.generation.generation_config import MAX_TOP_LOGPROBS
from keras_gen.layers.cached_attention import CacheView
from keras_gen.samplers.speculative_decoding import running_rows

# `generate` decodes positions below 256 against a cache of 256, then of
# 512, ... (see `attention_spans`).
MIN_ATTENTION_SPAN = 256


def attention_spans(cache_length, prefill_length, sampler):
    """The cache lengths a generate program's loop runs over, in turn.

    A decode step attends over its whole cache, most of which is still
    empty when `max_length` is long: positions below 256 are decoded
    against a cache of 256 positions, then up to 512 against 512, and so
    on, each a loop of its own inside the program (a fixed number per
    cache length; torch compiles one step for them all). The last span is
    the whole cache, with a speculative sampler's `lookahead` past it. `()`,
    one loop over the whole cache, for caches of at most 256 positions.
    """
    if not backend.grows_caches():
        return ()
    spans = []
    span = MIN_ATTENTION_SPAN
    while span < cache_length:
        if span >= prefill_length:
            spans.append(span)
        span *= 2
    return (*spans, cache_length + sampler.lookahead) if spans else ()


def program_outputs(sampler, loop, finished):
    """What the host reads from a loop state: the per-step outputs, the
    sampler's per-row counts (speculative decoding) and its `finished`
    rows: a tensor of tokens, or a dict of them and, for a sampler that
    returns other rows than it runs (beam search), `sequence_scores` and
    the returned rows' per-step outputs, which win over the loop's."""
    if not isinstance(finished, dict):
        finished = {"token_ids": finished}
    return {**loop.outputs, **sampler.row_counts(loop), **finished}


def bind(sampler, processors, loop):
    """The copy of `sampler` (and `processors`) that a program traces: it
    reads the numbers the program received, one per row of `loop`."""
    return sampler.bound(
        loop.parameters,
        processors,
        loop.processor_parameters,
        rows=ops.shape(loop.token_ids)[0],
    )


def start(
    lm, inputs, prefill_length, outputs, processors, sampler, attention_span=None
):
    """Seed the cache from the prompt; the loop state before step one.

    The cache holds `attention_span` positions, by default all of them
    (and the sampler's `lookahead` past them).
    """
    backbone = lm.backbone
    token_ids, mask = inputs["token_ids"], inputs["padding_mask"]
    batch, cache_length = ops.shape(token_ids)
    prompt, prompt_mask = token_ids[:, :prefill_length], mask[:, :prefill_length]
    hidden_states, state = backbone.build_state(
        prompt,
        prompt_mask,
        cache_length=attention_span or cache_length + sampler.lookahead,
    )
    # Rows are aligned left: the loop starts at the shortest prompt and
    # keeps prompt tokens wherever a longer row still has them.
    index = ops.min(ops.sum(ops.cast(mask, "int32"), axis=1))
    vocabulary_size = backbone.vocabulary_size
    # There are no more alternatives than tokens.
    top = min(MAX_TOP_LOGPROBS, vocabulary_size)
    shapes = {
        "log_probs": (batch, cache_length),
        "scores": (batch, cache_length, vocabulary_size),
        "logits": (batch, cache_length, vocabulary_size),
        "hidden_states": (batch, cache_length, backbone.hidden_dim),
        "top_token_ids": (batch, cache_length, top),
        "top_log_probs": (batch, cache_length, top),
    }
    dtypes = {"top_token_ids": "int32"}
    # A sampler's `start` reads its structure only, not its numbers.
    loop = sampler.start(
        token_ids,
        state,
        index,
        mask=mask,
        stop_token_ids=inputs["stop_token_ids"],
        hidden_states=hidden_states,
        end=inputs["end"],
        seed=inputs["seed"],
        outputs={
            name: ops.zeros(shapes[name], dtypes.get(name, "float32"))
            for name in outputs
        },
        stop_sequences=inputs.get("stop_sequences"),
    )
    loop = loop._replace(
        parameters=inputs["sampler"], processor_parameters=inputs.get("processors", [])
    )
    loop = bind(sampler, processors, loop).start_processors(loop)
    loop = sampler.prefill(loop, prompt, prompt_mask)
    if sampler.first_step_from_prompt:
        loop = first_step(lm, loop, hidden_states, processors, sampler)
    return loop


def first_step(lm, loop, hidden_states, processors, sampler):
    """Take the first step on logits from the prompt's forward pass.

    Seeding the cache already computed the last prompt token's hidden
    state, so the first token needs no decode step (which would run the
    model again and read the whole cache): time to first token follows
    the prompt's length, not `max_length`. A loop that runs at most
    once, so that nothing is generated when every row is at its end.
    """
    first = loop.index

    def prompt_next(prompt, state, index):
        last = backend.slice(hidden_states, index - 1, 1, axis=1)[:, 0]
        return lm.backbone.compute_logits(last), last, state

    sampler = bind(sampler, processors, loop)
    return backend.while_loop(
        lambda loop: ops.logical_and(sampler.cond(loop), loop.index == first),
        lambda loop: sampler.step(prompt_next, loop),
        loop,
        # On torch: one step is not worth a compiled graph.
        jit_compile=False,
    )


def run(lm, loop, processors, sampler, attention_spans=(), attention_span=None):
    """Run the sampler loop until it ends or reaches `loop.until`.

    With `attention_spans`, one loop per span in turn, each over a cache
    grown to that span, up to the positions it holds. With
    `attention_span` (a stream's chunk, its cache allocated whole), the
    steps attend over the cache's first `attention_span` positions, which
    hold every position they reach, and write into the whole cache in
    place.
    """
    sampler = bind(sampler, processors, loop)
    if attention_span is not None:
        views = CacheView.first_positions(loop.state, attention_span)
        loop = sampler.run(lm.next, loop._replace(state=views))
        return loop._replace(state=CacheView.whole(loop.state))
    if not attention_spans:
        return sampler.run(lm.next, loop)
    until = loop.until
    for span in attention_spans:
        state = lm.backbone.grow_state(loop.state, span)
        loop = loop._replace(state=backend.varying_length(state, axis=2))
        if sampler.lookahead:  # the rows advance apart: see `_fits`
            loop = backend.while_loop(
                lambda loop, span=span: ops.logical_and(
                    sampler.cond(loop), _fits(sampler, loop, span)
                ),
                lambda loop: sampler.step(lm.next, loop),
                loop,
            )
        else:  # a step at `index` writes and attends from `index - 1`
            loop = loop._replace(until=ops.minimum(until, span + 1))
            loop = sampler.run(lm.next, loop)
    return loop._replace(until=until)


def _fits(sampler, loop, span):
    """Whether a speculative step's positions fit in a cache of `span`: a
    row at length `L` writes and attends from `L - 1` to `L + lookahead - 1`."""
    lengths = loop.sampler_state.lengths
    furthest = ops.max(ops.where(running_rows(loop), lengths, 0))
    return furthest + sampler.lookahead <= span


def generate_step(lm, inputs, prefill_length, outputs, processors, sampler):
    """Generate for one padded batch: the body of the compiled program.

    See `CausalLM.generate_step` for the inputs and outputs.
    """
    spans = attention_spans(ops.shape(inputs["token_ids"])[1], prefill_length, sampler)
    first_span = spans[0] if spans else None
    loop = start(lm, inputs, prefill_length, outputs, processors, sampler, first_span)
    loop = run(lm, loop, processors, sampler, spans)
    return program_outputs(sampler, loop, sampler.finish(loop))


def stream_chunks(request, functions, sampler, streamer, max_time, chunk_size):
    """The chunks of a stream: `GenerationOutput`s, as the compiled
    `functions` (`make_stream_functions`' `(start, advance)`) produce them.

    Each chunk is `chunk_size` steps (a speculative step makes one or more
    tokens per row); the first token may come with the start. Leaving the
    iteration early stops generation and drops the cache.
    """
    started = time.monotonic()
    start, advance = functions
    # As in `generate`, a chunk attends over the shortest span that holds
    # the positions it reaches: a step at `index` writes `index - 1`; a
    # speculative step (`index` counts them) of a row at length `L` writes
    # up to `L + lookahead - 1`, and moves it on by at most `lookahead`.
    spans = attention_spans(request.cache_length, request.prefill_length, sampler)
    try:
        with backend.no_grad():
            loop = start(request.program_inputs, **request.static_arguments)
            advanced = sampler.first_step_from_prompt
            while not request.done:
                if not advanced:
                    index = int(ops.convert_to_numpy(loop.index))
                    until = min(index + chunk_size, request.cache_length)
                    reach = until - 1
                    if sampler.lookahead:
                        lengths = ops.convert_to_numpy(loop.sampler_state.lengths)
                        reach = lengths.max() + (until - index) * sampler.lookahead
                    span = next((s for s in spans[:-1] if s >= reach), None)
                    loop = advance(
                        loop._replace(until=ops.convert_to_tensor(until, "int32")),
                        attention_span=span,
                    )
                advanced = False
                time_is_up = (
                    max_time is not None and time.monotonic() - started >= max_time
                )
                view, limits = sampler.stream_view(loop)
                outputs = program_outputs(sampler, loop, view)
                chunk = request.read(outputs, limits, time_is_up)
                if streamer is not None:
                    streamer.put(chunk)
                yield chunk
    finally:
        # Whether the stream ended, broke off or raised: drop the cache.
        loop = None
        if streamer is not None:
            streamer.end()
