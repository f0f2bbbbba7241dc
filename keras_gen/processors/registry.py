"""Logits processors by name, and the structure key of a processor chain."""

from keras_gen.processors.bad_words import BadWords
from keras_gen.processors.choice import Choice
from keras_gen.processors.forced_eos import ForcedEOS
from keras_gen.processors.frequency_penalty import FrequencyPenalty
from keras_gen.processors.json_object import JsonObject
from keras_gen.processors.json_schema import JsonSchema
from keras_gen.processors.logit_bias import LogitBias
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.min_length import MinLength
from keras_gen.processors.min_p import MinP
from keras_gen.processors.no_repeat_ngram import NoRepeatNGram
from keras_gen.processors.presence_penalty import PresencePenalty
from keras_gen.processors.regex import Regex
from keras_gen.processors.repetition_penalty import RepetitionPenalty
from keras_gen.processors.structured_output import StructuredOutput
from keras_gen.processors.suppress_tokens import SuppressTokens
from keras_gen.processors.top_k import TopK
from keras_gen.processors.top_p import TopP
from keras_gen.processors.triggered import Triggered
from keras_gen.processors.typical import Typical

PROCESSORS = {
    "repetition_penalty": RepetitionPenalty,
    "presence_penalty": PresencePenalty,
    "frequency_penalty": FrequencyPenalty,
    "no_repeat_ngram": NoRepeatNGram,
    "bad_words": BadWords,
    "logit_bias": LogitBias,
    "suppress_tokens": SuppressTokens,
    "min_length": MinLength,
    "forced_eos": ForcedEOS,
    "top_k": TopK,
    "top_p": TopP,
    "min_p": MinP,
    "typical": Typical,
    "json_schema": JsonSchema,
    "json_object": JsonObject,
    "regex": Regex,
    "choice": Choice,
    "triggered": Triggered,
    "structured_output": StructuredOutput,
}


def register(name, cls):
    """Make `cls` available as `get(name)` and in config dicts."""
    PROCESSORS[name] = cls


def get(identifier):
    """A processor from an instance, a name or `{"name", "config"}`.

    Examples:
    >>> get({"name": "repetition_penalty", "config": {"penalty": 1.5}}).penalty
    1.5
    >>> type(get("top_k")).__name__
    'TopK'
    """
    if isinstance(identifier, LogitsProcessor):
        return identifier
    if isinstance(identifier, str) and identifier in PROCESSORS:
        return PROCESSORS[identifier]()
    if isinstance(identifier, dict) and identifier.get("name") in PROCESSORS:
        return PROCESSORS[identifier["name"]].from_config(identifier.get("config", {}))
    raise ValueError(
        "A processor must be a `LogitsProcessor`, a name or a config dict "
        f"with a name in {sorted(PROCESSORS)}. Received: {identifier!r}"
    )


def get_list(processors):
    """A tuple of processors from `None`, one processor or a list of them."""
    if processors is None:
        return ()
    if isinstance(processors, (LogitsProcessor, str, dict)):
        processors = [processors]
    return tuple(get(p) for p in processors)


def serialize(processor):
    """The config dict that `get` turns back into `processor`."""
    for name, cls in PROCESSORS.items():
        if type(processor) is cls:
            return {"name": name, "config": processor.get_config()}
    raise ValueError(f"{type(processor).__name__} is not registered.")


def structure(processors):
    """A hashable key: chains with equal keys share a compiled program."""
    return tuple(p.get_structure() for p in processors)
