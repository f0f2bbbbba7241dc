"""The compiled programs of `Engine`: admit a prompt, decode a chunk.

The engine keeps one loop state for a fixed number of slots: the key/value
cache (one row per slot; the target model's layers, then a draft model's
when the engine speculates with one), each slot's token buffer, position
and stop ids, and each slot's numbers for the sampler and for every
processor it may run. Two programs run over it:

- `admit(loop, slots, token_ids, mask)` seeds the cache rows of `slots`
  with one prompt each, or its first chunk (one program per prompt length
  bucket, for one row, and for a few rows of short prompts), and touches
  no other row;
- `extend(loop, slot, token_ids, start, cache_length)` continues them
  with the next chunk of a prompt (one program per chunk length bucket
  and length bucket of the positions it attends to), and
  `read_block` / `write_block` copy one block of positions out of and
  into them (the prefix cache's blocks);
- `decode(lm, sampler, processors, loop, tables, cache_length)` runs the
  sampler's own loop (`Sampler.run` over `CausalLM.next`, the step
  `generate` runs) with one position per slot, up to `steps` steps, over
  the first slots and the first positions of the cache (one program per
  row and length bucket); the last processor, the structured output,
  reads the shared automaton `tables`. With a `SpeculativeSampler` a step
  proposes (by prompt lookup, or with the draft model's cache layers) and
  verifies tokens, each slot keeping up to its own limit.

Nothing here samples: the sampler and the processors, bound to each slot's
numbers, do.
"""

from keras import ops

from keras_gen import backend
from keras_gen.layers.cached_attention import CacheView
from keras_gen.samplers.loop_state import LoopState
from keras_gen.samplers.speculative_decoding import SpeculativeSampler
from keras_gen.samplers.speculative_decoding import SpeculativeState
from keras_gen.samplers.speculative_decoding import lookup_proposes


def split(state, backbones):
    """`state`, every backbone's layers one after another, as one tuple of
    layers per backbone."""
    parts, start = [], 0
    for backbone in backbones:
        parts.append(state[start : start + backbone.num_layers])
        start += backbone.num_layers
    return parts


def admit(backbones, loop, slots, token_ids, mask):
    """Seed the cache rows of `slots` from `(len(slots), bucket)` prompts,
    one per slot (a slot named twice gets the same rows twice), for each
    of `backbones` (the target, then a draft)."""
    prompt_state = ()
    for backbone in backbones:
        _, layers = backbone.build_state(
            token_ids, mask, cache_length=ops.shape(token_ids)[1]
        )
        prompt_state += tuple(layers)
    zero = ops.zeros((), "int32")
    state = loop["state"]
    for row in range(ops.shape(token_ids)[0]):
        starts = (ops.cast(slots[row], "int32"), zero, zero, zero)
        state = tuple(
            tuple(
                backend.update_block(cache, block[row : row + 1], starts, donate=True)
                for cache, block in zip(layer, prompt_layer)
            )
            for layer, prompt_layer in zip(state, prompt_state)
        )
    return {**loop, "state": state}


def extend(backbones, loop, slot, token_ids, start, cache_length):
    """Write the keys and values of a `(1, bucket)` prompt chunk into slot
    `slot`'s cache rows from position `start`, each token attending to the
    slot's first `cache_length` positions before it, for each of
    `backbones`. The positions that padding fills are written too
    (harmless: a later chunk or step writes each position before it is
    read); every one lies inside the first `cache_length`."""
    state = ()
    for backbone, layers in zip(backbones, split(loop["state"], backbones)):
        state += backbone.extend_row(token_ids, layers, slot, start, cache_length)
    return {**loop, "state": state}


def read_block(loop, slot, start, length):
    """Positions `start` to `start + length` of slot `slot`'s cache rows:
    per layer, `(keys, values)` of shape `(heads, length, head_dim)`."""
    return tuple(
        tuple(
            backend.slice(backend.slice(x, slot, 1, axis=0), start, length, axis=2)[0]
            for x in layer
        )
        for layer in loop["state"]
    )


def write_block(loop, slot, start, block):
    """`loop` with `block` (as `read_block` gives it) written into slot
    `slot`'s cache rows from position `start`."""
    zero = ops.zeros((), "int32")
    starts = (ops.cast(slot, "int32"), zero, ops.cast(start, "int32"), zero)
    state = tuple(
        tuple(
            backend.update_block(cache, part[None], starts, donate=True)
            for cache, part in zip(layer, block_layer)
        )
        for layer, block_layer in zip(loop["state"], block)
    )
    return {**loop, "state": state}


def decode(lm, sampler, processors, slots, tables, cache_length, lookup_ngram=None):
    """Step every running slot until none runs or each ran `slots["steps"]`.

    `slots` is a dict of per-slot tensors (`token_ids`, `prompt_lengths`,
    `index`, `end`, `done`, `stop_token_ids`, `seed`, `top_rows`,
    `constraint_state`, `outputs`, the sampler's `parameters` and, per
    processor, `processor_parameters` and `processor_rows`) and the cache
    `state` (the target's layers, then the draft model's of a speculative
    sampler that has one: only its steps touch those); it may cover only
    the first slots (a row bucket), and every
    running slot ends within the first `cache_length` positions (a length
    bucket): the steps write into the whole cache in place and attend to
    that block of it alone. A speculative sampler also reads each slot's
    `limits` and `ngrams` (see `SpeculativeState`) and adds to its
    `draft_tokens` and `accepted_tokens`. With `lookup_ngram` (the engine
    speculates), a speculative chunk ends once no row has drafts and a
    plain one once a row has (see `lookup_proposes`): each step of a row
    that speculates is speculative exactly when it has drafts, whatever
    the other rows do. Returns `slots` as they are after the steps.
    """
    cache = slots["state"]
    rows, length = ops.shape(slots["token_ids"])
    block = (rows, cache_length) != tuple(ops.shape(cache[0][0])[::2])
    # Where each shape is a compile of its own (torch), every length bucket
    # reads a view, its length symbolic: one compiled step for them all.
    block = block or backend.compiles_each_shape()
    state = cache
    if block:  # the first rows and positions, read in place
        state = CacheView.first_positions(cache, cache_length)
    # The target's layers, then a draft model's (speculative decoding).
    layers = lm.backbone.num_layers
    state, draft_state = tuple(state[:layers]), tuple(state[layers:])
    columns = ops.arange(length, dtype="int32")[None, :]
    loop = LoopState(
        token_ids=slots["token_ids"],
        mask=columns < slots["prompt_lengths"][:, None],
        state=state,
        index=slots["index"],
        end=slots["end"],
        until=slots["index"] + slots["steps"],
        done=slots["done"],
        stop_token_ids=slots["stop_token_ids"],
        seed=slots["seed"],
        outputs=slots["outputs"],
        parameters=slots["parameters"],
        processor_parameters=slots["processor_parameters"],
        processor_rows=slots["processor_rows"],
        processor_states={"constraint_state": slots["constraint_state"]},
        top_rows=slots["top_rows"],
    )
    speculative = isinstance(sampler, SpeculativeSampler)
    if speculative:  # `index` counts steps; each slot's position moves on
        loop = loop._replace(
            index=ops.zeros((), "int32"),
            until=slots["steps"],
            sampler_state=SpeculativeState(
                lengths=slots["index"],
                accepted_tokens=slots["accepted_tokens"],
                draft_tokens=slots["draft_tokens"],
                draft_state=draft_state,
                limits=slots["limits"],
                ngrams=slots["ngrams"],
            ),
        )
    parameters = [*loop.processor_parameters, tables]
    bound = sampler.bound(loop.parameters, processors, parameters)
    if lookup_ngram is None:
        loop = bound.run(lm.next, loop)
    else:

        def cond(loop):
            lengths = loop.sampler_state.lengths if speculative else loop.index
            running = ops.logical_and(ops.logical_not(loop.done), lengths < loop.end)
            proposes = lookup_proposes(
                loop.token_ids,
                lengths,
                running,
                slots["limits"],
                slots["ngrams"],
                lookup_ngram,
            )
            proposes = ops.any(proposes)
            if not speculative:
                proposes = ops.logical_not(proposes)
            return ops.logical_and(bound.cond(loop), proposes)

        loop = backend.while_loop(cond, lambda loop: bound.step(lm.next, loop), loop)
    if speculative:
        draft_state = loop.sampler_state.draft_state
    state = tuple(loop.state) + tuple(draft_state)
    if block:
        state = CacheView.whole(state)
    results = {
        **slots,
        "state": state,
        "token_ids": loop.token_ids,
        "index": loop.index,
        "done": loop.done,
        "outputs": loop.outputs,
        "constraint_state": loop.processor_states["constraint_state"],
    }
    if speculative:
        counts = loop.sampler_state
        results["index"] = counts.lengths
        results["draft_tokens"] = counts.draft_tokens
        results["accepted_tokens"] = counts.accepted_tokens
    return results
