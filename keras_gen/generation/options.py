"""The one mapping from generation options to a sampler and processors.

`CausalLM.generate`, the `keras-gen` command and the server all turn a
`GenerationConfig` into `(sampler, processors)` here, with the same rules:
the decoding mode picks the sampler, the filters (min-p, top-k, top-p,
typical) all apply together in vLLM's order, and each penalty, ban and
bias becomes one processor, in vLLM's order.
"""

from keras_gen import processors as processors_lib
from keras_gen import samplers
from keras_gen.generation.generation_config import GROUPS
from keras_gen.generation.generation_config import OPTIONS
from keras_gen.generation.generation_config import GenerationConfig
from keras_gen.kernels.filters import FILTERS as FILTER_TABLE

# The filters of a sampled decode, by option name, in the order they apply.
FILTERS = tuple(name for name in FILTER_TABLE if OPTIONS[name]["filter"])
# Sampling options at the values that change nothing.
NEUTRAL = {
    **{n: m["neutral"] for n, m in OPTIONS.items() if m["group"] == "sampling"},
    **{name: FILTER_TABLE[name].neutral for name in FILTERS},
}
# The processor each processor option builds (structured outputs of every
# kind count as `response_format`'s), and the options of each, in order.
PROCESSOR_CLASSES = {
    name: getattr(processors_lib, meta["processor"][0])
    for name, meta in OPTIONS.items()
    if meta["processor"]
}
PROCESSOR_CLASSES["response_format"] = processors_lib.StructuredOutput
_PROCESSOR_OPTIONS = {}
for _name, _meta in OPTIONS.items():
    if _meta["processor"]:
        _PROCESSOR_OPTIONS.setdefault(_meta["processor"][0], []).append(_name)
# Candidates per step of contrastive search when `top_k` does not say.
CONTRASTIVE_TOP_K = 4


def call_options(generation_config, options):
    """One call's options: its `generation_config` (a config or a dict),
    then its keywords (`None` values unset). `stop_token_ids=None` means
    never stop early, as in keras-hub."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(
            f"Unknown keyword arguments {unknown}. Generation options are the "
            f"fields of `keras_gen.GenerationConfig`: {sorted(OPTIONS)}"
        )
    if "stop_token_ids" in options and options["stop_token_ids"] is None:
        options = {**options, "stop_token_ids": []}
    call = GenerationConfig.from_dict(
        GenerationConfig() if generation_config is None else generation_config
    )
    return call.merge({k: v for k, v in options.items() if v is not None})


def build_sampler(config, complete=False):
    """The sampler `config`'s decoding options ask for.

    With `complete`, a sampled decode carries every filter (neutral when
    not asked for, and then not run), so that requests with any mix of
    filters share one compiled program; otherwise only the filters that cut
    something.
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
        elif complete:
            filters[name] = NEUTRAL[name]
    return samplers.RandomSampler(temperature=temperature, **filters)


def build_processors(config, complete=False):
    """The logits processors `config` asks for, in the order of the options'
    declaration (vLLM's: bans, minimum lengths, biases, then repetition,
    frequency and presence penalties; then transformers' n-gram ban and
    forced end token; the structured output last). An option at its neutral
    value (or `0`, or empty) adds nothing.

    With `complete`, the options with a neutral value (the penalties) are
    always there, neutral when not asked for, so that requests with any
    penalties share one program.
    """
    chain = []
    for function, names in _PROCESSOR_OPTIONS.items():
        arguments = {}
        for name in names:
            meta, value = OPTIONS[name], getattr(config, name)
            neutral = meta["neutral"]
            if neutral is None:  # unset, 0 or empty: off
                if not value:
                    continue
            elif value is None or value == neutral:
                if not complete:
                    continue
                value = neutral
            arguments[meta["processor"][1]] = value
        processor = (
            getattr(processors_lib, function)(**arguments) if arguments else None
        )
        if processor is not None:
            chain.append(processor)
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
