"""`GenerationConfig`: every generation option, validated in one place."""

import dataclasses
import json
import os
import warnings

from keras_gen.utils import checks
from keras_gen.utils.files import read_json_object

GENERATION_CONFIG_FILE = "generation_config.json"
# The most alternatives `top_logprobs` may ask for (OpenAI's limit).
MAX_TOP_LOGPROBS = 20
# Stop strings: how many, and how long (the loop's tables grow with both:
# vocabulary x strings x characters).
MAX_STOP_STRINGS = 8
MAX_STOP_STRING_LENGTH = 32
# Sequences per prompt (`num_return_sequences`, `num_beams`).
MAX_RETURN_SEQUENCES = 64
STEP_OUTPUTS = {
    "output_log_probs": "log_probs",
    "output_scores": "scores",
    "output_logits": "logits",
    "output_hidden_states": "hidden_states",
}


def _via(class_name):
    """A check that builds the processor: its own rules, the option's name.

    Imported when used: this module loads without Keras (the `keras-gen`
    command reads its options before it chooses the backend).
    """

    def check(name, value):
        from keras_gen import processors

        try:
            getattr(processors, class_name)(value)
        except (TypeError, ValueError) as error:
            raise type(error)(f"`{name}`: {error}") from None
        return value

    return check


def _int(low=None, high=None):
    return lambda name, value: checks.check_int(name, value, low, high)


def _number(low=None, high=None):
    return lambda name, value: checks.check_number(name, value, low, high)


def _early_stopping(name, value):
    if isinstance(value, bool) or value == "never":
        return value
    raise ValueError(f"`{name}` must be True, False or 'never'. Received: {value!r}")


def _stop_token_ids(name, value):
    if isinstance(value, str):
        if value == "auto":
            return None  # the default: the model's end tokens
        raise TypeError(
            f"`{name}` must be a list of token ids ('auto', the default, means "
            f"the model's end tokens). Received: {value!r}"
        )
    return checks.check_token_ids(name, value, allow_empty=True)


def _logit_bias(name, value):
    from keras_gen import processors

    if not isinstance(value, dict):
        raise TypeError(
            f"`{name}` must be a dict {{token_id: bias}}. Received: {value!r}"
        )
    try:
        return processors.LogitBias(value).bias
    except (TypeError, ValueError) as error:
        raise type(error)(f"`{name}`: {error}") from None


def _response_format(name, value):
    from keras_gen import processors

    if not isinstance(value, (dict, list, tuple, processors.StructuredOutput)):
        raise TypeError(
            f"`{name}` must be a dict (or a list of them, one per prompt) or "
            "a `keras_gen.processors.StructuredOutput`: "
            f"{processors.response_format.FORMS}. Received: {value!r}"
        )
    try:
        processors.from_response_format(value)
    except (TypeError, ValueError) as error:
        raise type(error)(f"`{name}`: {error}") from None
    return value


def option(
    check,
    group,
    help,
    *,
    flag=None,
    field=None,
    neutral=None,
    processor=None,
    example=None,
    filter=False,
):
    """A field, unset (`None`) by default: the one place an option is
    declared. Every entry point reads it from here.

    Args:
        check: `check(name, value)` returns the value to keep, or raises.
        group: `"length"` options replace each other as a pair in `merge`;
            `"sampling"` options are what a sampler object stands for;
            `"processors"` options build logits processors.
        help: one line: the CLI's help and the docs' meaning.
        flag: `int` or `float`: the `keras-gen generate` flag
            `--<name-with-dashes>` of that type; `None`: no flag.
        field: the server request field that gives it as it is.
        neutral: the value that changes nothing (a penalty's 0 or 1).
        processor: `(function, argument)`: the function of
            `keras_gen.processors` that applies the option (a processor
            class) and the argument it fills; options of one function build
            one processor, in the order they are declared here.
        example: a value that builds its processor (the serving engine's
            processor lanes are built from these).
        filter: applied by the sampling filter of the same name
            (`keras_gen.kernels.filters.FILTERS`, which holds its check
            and neutral value too).
    """
    return dataclasses.field(
        default=None,
        metadata={
            "check": check,
            "group": group,
            "help": help,
            "flag": flag,
            "field": field,
            "neutral": neutral,
            "processor": processor,
            "example": example,
            "filter": filter,
        },
    )


def _filter(name, value):
    """A sampling filter's own check (loaded when used: see `_via`)."""
    from keras_gen.kernels.filters import FILTERS

    return FILTERS[name].check(name, value)


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """Every generation option, in one frozen, validated record.

    Field names are transformers' where the concept is the same. A field
    left at `None` is unset: another layer (a call keyword, the model's own
    `generation_config`) or the built-in default decides it. Every value is
    checked when the config is made; a bad one raises a `ValueError` or
    `TypeError` that names the option.

    Where `CausalLM.generate` takes its options from, strongest first: call
    keywords, its `generation_config` argument, what `compile(sampler=...,
    processors=...)` set, then `lm.generation_config` (read from the model
    folder's `generation_config.json`).

    The decoding mode: `num_beams > 1` is beam search, `penalty_alpha > 0`
    contrastive search, `do_sample=True` sampling, else greedy. A config
    that gives `temperature`, `top_k`, `top_p`, `min_p` or `typical_p` but
    not `do_sample` samples (as vLLM and OpenAI read them); a
    `generation_config.json` without `do_sample` does not (as transformers
    reads it). A temperature below 1e-5 decodes greedily. Unset filters are
    off (transformers would add `top_k=50` when sampling; vLLM does not).

    Examples:
    >>> config = GenerationConfig(do_sample=True, top_k=40, temperature=0.8)
    >>> config.merge(GenerationConfig(temperature=0.5)).to_dict()
    {'do_sample': True, 'temperature': 0.5, 'top_k': 40}
    >>> GenerationConfig(top_p=1.5)
    Traceback (most recent call last):
    ...
    ValueError: `top_p` must be in (0, 1]. Received: top_p=1.5
    """

    # Lengths.
    max_new_tokens: int = option(
        checks.check_count, "length", "New tokens per row.", flag=int
    )
    max_length: int = option(
        checks.check_count, "length", "Prompt plus new tokens per row."
    )
    max_time: float = option(
        checks.check_positive,
        None,
        "Seconds; rows still running then end ('time').",
        flag=float,
    )
    # Decoding mode and sampling.
    do_sample: bool = option(
        checks.check_bool,
        "sampling",
        "Sample instead of decoding greedily.",
        neutral=False,
    )
    temperature: float = option(
        _number(0),
        "sampling",
        "Divides the logits; below 1e-5 is greedy.",
        flag=float,
        field="temperature",
        neutral=1.0,
    )
    top_k: int = option(
        _filter,
        "sampling",
        "Keep the k most likely tokens (0: all).",
        flag=int,
        field="top_k",
        filter=True,
    )
    top_p: float = option(
        _filter,
        "sampling",
        "Keep the fewest tokens whose mass reaches p (1: all).",
        flag=float,
        field="top_p",
        filter=True,
    )
    min_p: float = option(
        _filter,
        "sampling",
        "Keep tokens >= min_p times the top one's probability (0: all).",
        flag=float,
        field="min_p",
        filter=True,
    )
    typical_p: float = option(
        _filter,
        "sampling",
        "Locally typical sampling mass (1: all).",
        flag=float,
        field="typical_p",
        filter=True,
    )
    top_n_sigma: float = option(
        _filter,
        "sampling",
        "Keep tokens within n standard deviations of the top logit (0: all).",
        flag=float,
        field="top_n_sigma",
        filter=True,
    )
    seed: int = option(
        _int(), None, "The same seed gives the same tokens.", flag=int, field="seed"
    )
    num_beams: int = option(
        _int(1, MAX_RETURN_SEQUENCES),
        "sampling",
        "Beam search with this many beams (1: off).",
        flag=int,
        neutral=1,
    )
    length_penalty: float = option(
        _number(-5, 5),
        "sampling",
        "Beam score: log-prob sum / length ** this.",
        flag=float,
        neutral=1.0,
    )
    early_stopping: object = option(
        _early_stopping,
        "sampling",
        "Beam search stop rule: True, False or 'never'.",
        neutral=False,
    )
    num_return_sequences: int = option(
        _int(1, MAX_RETURN_SEQUENCES),
        "sampling",
        "Sequences per prompt (beam search or sampling).",
        neutral=1,
    )
    penalty_alpha: float = option(
        checks.check_fraction,
        "sampling",
        "Contrastive search penalty (0: off).",
        flag=float,
        neutral=0.0,
    )
    # Logits processors, in the order they apply (vLLM's: bans, minimum
    # lengths, biases, then the penalties; then transformers' n-gram ban and
    # forced end token; the structured output last).
    bad_words_ids: list = option(
        checks.check_token_sequences,
        "processors",
        "Token sequences never to generate.",
        field="bad_words_ids",
        processor=("BadWords", "token_id_sequences"),
        example=[[0]],
    )
    suppress_tokens: list = option(
        checks.check_token_ids,
        "processors",
        "Tokens never to generate.",
        processor=("SuppressTokens", "token_ids"),
        example=[0],
    )
    min_new_tokens: int = option(
        _int(0),
        "processors",
        "No end token before this many new tokens.",
        flag=int,
        field="min_tokens",
        processor=("MinLength", "min_new_tokens"),
        example=1,
    )
    min_length: int = option(
        _int(0),
        "processors",
        "No end token before this total length.",
        field="min_length",
        processor=("MinLength", "min_length"),
    )
    logit_bias: dict = option(
        _logit_bias,
        "processors",
        "Token id (or id tuple) -> bias; -inf bans.",
        processor=("LogitBias", "bias"),
        example={0: 0.0},
    )
    repetition_penalty: float = option(
        _via("RepetitionPenalty"),
        "processors",
        "Divide seen tokens' logits by it (1: off).",
        flag=float,
        field="repetition_penalty",
        neutral=1.0,
        processor=("RepetitionPenalty", "penalty"),
    )
    frequency_penalty: float = option(
        _via("FrequencyPenalty"),
        "processors",
        "Subtract per generated occurrence (0: off).",
        flag=float,
        field="frequency_penalty",
        neutral=0.0,
        processor=("FrequencyPenalty", "value"),
    )
    presence_penalty: float = option(
        _via("PresencePenalty"),
        "processors",
        "Subtract from every generated token (0: off).",
        flag=float,
        field="presence_penalty",
        neutral=0.0,
        processor=("PresencePenalty", "value"),
    )
    no_repeat_ngram_size: int = option(
        _int(0, checks.MAX_NGRAM_SIZE),
        "processors",
        "Never repeat an n-gram of this size (0: off).",
        flag=int,
        field="no_repeat_ngram_size",
        processor=("NoRepeatNGram", "n"),
        example=1,
    )
    forced_eos_token_id: list = option(
        checks.check_token_ids,
        "processors",
        "End token forced at each row's last position.",
        field="forced_eos_token_id",
        processor=("ForcedEOS", "eos_id"),
        example=[0],
    )
    response_format: dict = option(
        _response_format,
        "processors",
        "Structured output: a JSON schema, JSON object, regex or choice "
        "(OpenAI's or vLLM's form; a list: one per prompt), or a "
        "`StructuredOutput` (not saved with the config).",
        processor=("from_response_format", "value"),
    )
    # Stopping.
    eos_token_id: list = option(
        checks.check_token_ids, None, "The model's end token(s)."
    )
    stop_token_ids: list = option(
        _stop_token_ids, None, "Ids that end a row ([]: never; default: eos)."
    )
    stop_strings: list = option(
        lambda name, value: checks.check_strings(
            name, value, MAX_STOP_STRINGS, MAX_STOP_STRING_LENGTH
        ),
        None,
        "Strings that end a row (needs a tokenizer).",
    )
    stop_sequences: list = option(
        checks.check_token_sequences, None, "Token id sequences that end a row."
    )
    include_stop_string: bool = option(
        checks.check_bool, None, "Keep the stop string in the text."
    )
    # Per-step outputs.
    output_scores: bool = option(
        checks.check_bool,
        None,
        "Per-step logits after processors and temperature.",
        field="output_scores",
    )
    output_logits: bool = option(
        checks.check_bool, None, "Per-step raw logits.", field="output_logits"
    )
    output_log_probs: bool = option(
        checks.check_bool, None, "Per-step log-prob of the chosen token."
    )
    output_hidden_states: bool = option(
        checks.check_bool, None, "Per-step final hidden state."
    )
    top_logprobs: int = option(
        _int(0, MAX_TOP_LOGPROBS),
        None,
        "Per step, the log-probs of this many most likely tokens.",
    )
    # Speculative decoding.
    num_speculative_tokens: int = option(
        _int(1, checks.MAX_SPECULATIVE_TOKENS),
        None,
        "Tokens a draft proposes per step.",
        field="num_speculative_tokens",
    )
    prompt_lookup_ngram: int = option(
        _int(1, checks.MAX_NGRAM_SIZE),
        None,
        "Draft by prompt lookup of this n-gram.",
        field="prompt_lookup_ngram",
    )
    # Serving.
    cache_prompt: bool = option(
        checks.check_bool,
        None,
        "Serving engine: reuse and keep the prompt's cached prefix (default true).",
        field="cache_prompt",
    )

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                value = field.metadata["check"](field.name, value)
                object.__setattr__(self, field.name, value)
        self._check_together()

    def _check_together(self):
        if self.max_length is not None and self.max_new_tokens is not None:
            raise ValueError(
                "Give `max_length` (prompt plus new tokens) or `max_new_tokens`, "
                f"not both. Received: max_length={self.max_length}, "
                f"max_new_tokens={self.max_new_tokens}"
            )
        beams = (self.num_beams or 1) > 1
        contrastive = (self.penalty_alpha or 0) > 0
        if self.do_sample and (beams or contrastive):
            option = "num_beams" if beams else "penalty_alpha"
            raise ValueError(
                f"`do_sample=True` does not combine with `{option}`: beam and "
                "contrastive search do not sample. Give one of them."
            )
        if beams and contrastive:
            raise ValueError(
                "`num_beams > 1` and `penalty_alpha > 0` exclude each other."
            )
        if beams and (self.num_return_sequences or 1) > self.num_beams:
            raise ValueError(
                "`num_return_sequences` must be <= `num_beams`. Received: "
                f"num_return_sequences={self.num_return_sequences}, "
                f"num_beams={self.num_beams}"
            )

    def __repr__(self):
        options = ", ".join(f"{k}={v!r}" for k, v in self._values().items())
        return f"GenerationConfig({options})"

    # Reading and writing.

    @classmethod
    def from_dict(cls, config, strict=True):
        """A config from a dict of options.

        With `strict` (the default), unknown names are an error. Without it
        (how files are read), names keras-gen does not use are ignored and
        invalid values are dropped with a warning, and `max_new_tokens` wins
        over `max_length` when both are given, as in transformers.
        """
        if isinstance(config, GenerationConfig):
            return config
        if not isinstance(config, dict):
            raise TypeError(
                "`generation_config` must be a GenerationConfig or a dict of "
                f"options. Received: {config!r}"
            )
        unknown = sorted(set(config) - set(OPTIONS))
        if unknown and strict:
            raise ValueError(
                f"Unknown generation options {unknown}. Options: {sorted(OPTIONS)}"
            )
        values = {k: v for k, v in config.items() if k in OPTIONS and v is not None}
        if strict:
            return cls(**values)
        if "max_new_tokens" in values:
            values.pop("max_length", None)
        for name in list(values):
            try:
                cls(**{name: values[name]})
            except (TypeError, ValueError) as error:
                warnings.warn(f"Ignoring generation option {name!r}: {error}")
                del values[name]
        try:
            return cls(**values)
        except ValueError as error:
            warnings.warn(f"Ignoring the generation config's sampling options: {error}")
            return cls(
                **{k: v for k, v in values.items() if k not in GROUPS["sampling"]}
            )

    def to_dict(self):
        """The set options, JSON-ready (what `generation_config.json` holds;
        a `StructuredOutput` object is left out)."""
        from keras_gen.processors import StructuredOutput

        config = {}
        for name in OPTIONS:
            value = getattr(self, name)
            if value is None or isinstance(value, StructuredOutput):
                continue
            if name == "logit_bias":
                value = {
                    ",".join(map(str, k)) if isinstance(k, tuple) else str(k): v
                    for k, v in value.items()
                }
            config[name] = list(value) if isinstance(value, tuple) else value
        return config

    @classmethod
    def from_pretrained(cls, path):
        """Read `generation_config.json` from a model folder (or a file path).

        Read as transformers reads it: without `do_sample` the model decodes
        greedily; options keras-gen does not use are ignored and invalid
        values dropped with a warning. A folder without the file gives an
        empty config.
        """
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, GENERATION_CONFIG_FILE)
        if not os.path.isfile(path):
            return cls()
        config = cls.from_dict(read_json_object(path), strict=False)
        if config.do_sample is None:
            config = dataclasses.replace(config, do_sample=False)
        return config

    def save_pretrained(self, path, extra=None):
        """Write `generation_config.json` into the folder `path`.

        `extra` adds entries (the tokenizer's `bos_token_id`, ...) that
        transformers reads from the same file.
        """
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, GENERATION_CONFIG_FILE), "w") as f:
            json.dump({**(extra or {}), **self.to_dict()}, f, indent=2)

    # Combining.

    def replace(self, **options):
        """A copy with these options changed (`None` unsets one)."""
        return dataclasses.replace(self, **options)

    def without(self, *groups):
        """A copy with the options of these groups (`"length"`,
        `"sampling"`, `"processors"`) unset."""
        names = [name for group in groups for name in GROUPS[group]]
        return dataclasses.replace(self, **dict.fromkeys(names))

    def sets(self, names):
        """Whether any of these options is set."""
        return any(getattr(self, name) is not None for name in names)

    def merge(self, overrides):
        """A copy in which the options `overrides` sets replace these.

        `max_new_tokens` and `max_length` replace each other as a pair, and
        a decoding mode that `overrides` chooses clears the others: its
        `do_sample=True` ends beam and contrastive search, its
        `num_beams > 1` or `penalty_alpha > 0` ends sampling, and sampling
        numbers without `do_sample` turn sampling on (but tune a beam or
        contrastive search of this config).
        """
        overrides = GenerationConfig.from_dict(overrides)
        values = self._values()
        if overrides.sets(GROUPS["length"]):
            values.pop("max_new_tokens", None)
            values.pop("max_length", None)
        values.update(overrides._mode(self))
        values.update(overrides._values())
        return GenerationConfig(**values)

    def _values(self):
        return {
            name: getattr(self, name)
            for name in OPTIONS
            if getattr(self, name) is not None
        }

    def _mode(self, base):
        """The decoding-mode options this config implies over `base`.

        Sampling numbers without `do_sample` mean sampling, unless `base`
        searches with beams or contrastively: then they tune that search.
        """
        if (self.num_beams or 1) > 1 or (self.penalty_alpha or 0) > 0:
            return {"do_sample": False}
        if self.do_sample:
            return {"num_beams": 1, "penalty_alpha": 0.0}
        searching = base.mode in ("beam", "contrastive")
        if self.do_sample is None and self.sets(SAMPLING_NUMBERS) and not searching:
            return {"do_sample": True}
        return {}

    @property
    def mode(self):
        """`"beam"`, `"contrastive"`, `"sample"` or `"greedy"`."""
        if (self.num_beams or 1) > 1:
            return "beam"
        if (self.penalty_alpha or 0) > 0:
            return "contrastive"
        sampling = self.do_sample
        if sampling is None:
            sampling = self.sets(SAMPLING_NUMBERS)
        temperature = 1.0 if self.temperature is None else self.temperature
        return (
            "sample" if sampling and temperature >= checks.MIN_TEMPERATURE else "greedy"
        )

    @property
    def outputs(self):
        """The per-step outputs asked for, by name (`"scores"`, ...)."""
        names = [name for option, name in STEP_OUTPUTS.items() if getattr(self, option)]
        if self.top_logprobs:
            names += ["top_token_ids", "top_log_probs"]
        return tuple(names)


OPTIONS = {f.name: f.metadata for f in dataclasses.fields(GenerationConfig)}
# Options that, given without `do_sample`, mean sampling: the temperature
# and the filters.
SAMPLING_NUMBERS = ("temperature",) + tuple(
    n for n, m in OPTIONS.items() if m["filter"]
)
GROUPS = {
    group: tuple(name for name, meta in OPTIONS.items() if meta["group"] == group)
    for group in ("length", "sampling", "processors")
}
