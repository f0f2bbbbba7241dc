"""The one mapping from generation options to a sampler and processors.

`CausalLM.generate`, the `keras-gen` command and the server all turn a
`GenerationConfig` into `(sampler, processors)` here, with the same rules:
the decoding mode picks the sampler, the filters (min-p, top-k, top-p,
typical) all apply together in vLLM's order, and each penalty, ban and
bias becomes one processor, in vLLM's order.
"""

from keras_gen import processors as processors_lib
from keras_gen import samplers
from keras_gen.generation_config import GROUPS
from keras_gen.generation_config import GenerationConfig

# Sampling options at the values that change nothing.
NEUTRAL = {
    "do_sample": False,
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "num_beams": 1,
    "length_penalty": 1.0,
    "early_stopping": False,
    "num_return_sequences": 1,
    "penalty_alpha": 0.0,
}
# The filters of a sampled decode, by option name.
FILTERS = ("top_k", "top_p", "min_p", "typical_p")
# The processor each processor option builds.
PROCESSOR_CLASSES = {
    "bad_words_ids": processors_lib.BadWords,
    "suppress_tokens": processors_lib.SuppressTokens,
    "min_length": processors_lib.MinLength,
    "min_new_tokens": processors_lib.MinLength,
    "logit_bias": processors_lib.LogitBias,
    "repetition_penalty": processors_lib.RepetitionPenalty,
    "frequency_penalty": processors_lib.FrequencyPenalty,
    "presence_penalty": processors_lib.PresencePenalty,
    "no_repeat_ngram_size": processors_lib.NoRepeatNGram,
    "forced_eos_token_id": processors_lib.ForcedEOS,
    "response_format": processors_lib.StructuredOutput,
}
# Candidates per step of contrastive search when `top_k` does not say.
CONTRASTIVE_TOP_K = 4


def build_sampler(config, complete=False):
    """The sampler `config`'s decoding options ask for.

    With `complete`, a sampled decode carries every filter but typical
    (neutral when not asked for), so that requests with any mix of
    temperature, top-k, top-p and min-p share one compiled program (the
    server's case); otherwise only the filters that cut something.
    """
    mode = config.mode
    temperature = 1.0 if config.temperature is None else config.temperature
    if mode == "beam":
        return samplers.BeamSampler(
            num_beams=config.num_beams,
            length_penalty=_value(config, "length_penalty"),
            early_stopping=_value(config, "early_stopping"),
            num_return_sequences=_value(config, "num_return_sequences"),
            temperature=temperature,
        )
    if mode == "contrastive":
        return samplers.ContrastiveSampler(
            k=config.top_k or CONTRASTIVE_TOP_K,
            alpha=config.penalty_alpha,
            temperature=temperature,
        )
    if mode == "greedy":
        return samplers.GreedySampler()
    filters = {}
    for name in FILTERS:
        value = getattr(config, name)
        if value is not None and value != NEUTRAL[name]:
            filters[name] = value
        elif complete and name != "typical_p":
            filters[name] = NEUTRAL[name]
    return samplers.RandomSampler(temperature=temperature, **filters)


def build_processors(config, complete=False):
    """The logits processors `config` asks for, in vLLM's order: bans,
    minimum lengths, biases, then repetition, frequency and presence
    penalties (and transformers' n-gram ban and forced end token).

    With `complete`, the three penalties are always there (neutral when not
    asked for), so that requests with any penalties share one program.
    """
    chain = []
    if config.bad_words_ids:
        chain.append(processors_lib.BadWords(config.bad_words_ids))
    if config.suppress_tokens:
        chain.append(processors_lib.SuppressTokens(config.suppress_tokens))
    if config.min_length or config.min_new_tokens:
        chain.append(
            processors_lib.MinLength(
                min_length=config.min_length or None,
                min_new_tokens=config.min_new_tokens or None,
            )
        )
    if config.logit_bias:
        chain.append(processors_lib.LogitBias(config.logit_bias))
    for name, cls, neutral in (
        ("repetition_penalty", processors_lib.RepetitionPenalty, 1.0),
        ("frequency_penalty", processors_lib.FrequencyPenalty, 0.0),
        ("presence_penalty", processors_lib.PresencePenalty, 0.0),
    ):
        value = getattr(config, name)
        if complete or (value is not None and value != neutral):
            chain.append(cls(neutral if value is None else value))
    if config.no_repeat_ngram_size:
        chain.append(processors_lib.NoRepeatNGram(config.no_repeat_ngram_size))
    if config.forced_eos_token_id:
        chain.append(processors_lib.ForcedEOS(config.forced_eos_token_id))
    constraint = processors_lib.from_response_format(config.response_format)
    if constraint is not None:
        chain.append(constraint)
    return chain


def sampler_options(sampler):
    """Every sampling option of a built-in sampler (`None` for others)."""
    read = _SAMPLER_OPTIONS.get(type(sampler))
    if read is None:
        return None
    return {**NEUTRAL, "temperature": sampler.temperature, **read(sampler)}


_SAMPLER_OPTIONS = {
    samplers.GreedySampler: lambda s: {},
    samplers.RandomSampler: lambda s: {
        "do_sample": True,
        **{name: getattr(s, name) for name in FILTERS if getattr(s, name) is not None},
    },
    samplers.TopKSampler: lambda s: {"do_sample": True, "top_k": s.k},
    samplers.TopPSampler: lambda s: {
        "do_sample": True,
        "top_p": s.p,
        "top_k": s.k or 0,
    },
    samplers.MinPSampler: lambda s: {"do_sample": True, "min_p": s.p},
    samplers.BeamSampler: lambda s: {
        "num_beams": s.num_beams,
        "length_penalty": s.length_penalty,
        "early_stopping": s.early_stopping,
        "num_return_sequences": s.num_return_sequences,
    },
    samplers.ContrastiveSampler: lambda s: {"penalty_alpha": s.alpha, "top_k": s.k},
}


def resolve(base, call, sampler=None, processors=None, complete=False):
    """The options, sampler and processors of one generation call.

    Strongest first: the options of `call`, then the `sampler` and
    `processors` objects (a call's or `compile`'s), then `base` (the
    model's `generation_config`). A sampler object replaces all of
    `base`'s sampling options and a processor chain all of its processor
    options; `call`'s options then adjust them (a call's `temperature`
    applies to a compiled `TopKSampler`; its `repetition_penalty` replaces
    the chain's `RepetitionPenalty`, or joins the chain).

    Returns:
        `(config, sampler, processors)`: the merged `GenerationConfig`, a
        `Sampler` and a tuple of `LogitsProcessor`s.
    """
    call = GenerationConfig.from_dict(call)
    changes_sampler = call.sets(GROUPS["sampling"])
    if sampler is not None:
        options = sampler_options(sampler)
        if options is None and changes_sampler:
            names = [n for n in GROUPS["sampling"] if getattr(call, n) is not None]
            raise ValueError(
                f"{type(sampler).__name__} is not a built-in sampler, so the "
                f"options {names} cannot change it: set its attributes, or "
                "compile a built-in sampler."
            )
        base = base.without("sampling").merge(options or {})
    config = base.merge(call)
    if sampler is None or changes_sampler:
        sampler = build_sampler(config, complete)
    if processors is None:
        return config, sampler, tuple(build_processors(config, complete))
    return config, sampler, _adjust(tuple(processors), call)


def _adjust(chain, call):
    """`chain` with the processors `call`'s options ask for in place of
    those of the same kind (an option at its neutral value removes its
    kind), and any others after it."""
    new = build_processors(call)
    kinds = {
        PROCESSOR_CLASSES[name]
        for name in GROUPS["processors"]
        if getattr(call, name) is not None
    }
    adjusted = []
    for processor in chain:
        if _kind(processor) not in kinds:
            adjusted.append(processor)
            continue
        replacement = [p for p in new if _kind(p) is _kind(processor)]
        adjusted += [p for p in replacement if p not in adjusted]
    return tuple(adjusted + [p for p in new if p not in adjusted])


def _kind(processor):
    """The processor class an option builds: every structured output is
    `response_format`'s kind."""
    if isinstance(processor, processors_lib.StructuredOutput):
        return processors_lib.StructuredOutput
    return type(processor)


def _value(config, name):
    value = getattr(config, name)
    return NEUTRAL[name] if value is None else value
