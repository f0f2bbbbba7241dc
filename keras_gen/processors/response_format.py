"""Structured output from the request forms clients send."""

from keras_gen.processors.choice import Choice
from keras_gen.processors.json_object import JsonObject
from keras_gen.processors.json_schema import JsonSchema
from keras_gen.processors.regex import Regex
from keras_gen.processors.structured_output import StructuredOutput

# vLLM's `structured_outputs` (and `guided_*`) keys, by processor.
_VLLM = {"json": JsonSchema, "regex": Regex, "choice": Choice}
FORMS = (
    '{"type": "text"}, {"type": "json_object"}, {"type": "json_schema", '
    '"json_schema": {"schema": ...}}, {"type": "regex", "pattern": ...}, '
    '{"type": "choice", "choices": [...]}, or vLLM\'s {"json": ...}, '
    '{"regex": ...}, {"choice": [...]}, {"json_object": true}'
)


def _one(value):
    if value is None or isinstance(value, StructuredOutput):
        return value
    if not isinstance(value, dict):
        raise TypeError(
            f"`response_format` must be a dict: {FORMS}. Received: {value!r}"
        )
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonObject()
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise ValueError(
                '`response_format` of type "json_schema" needs "json_schema": '
                f'{{"name": ..., "schema": {{...}}}}. Received: {value!r}'
            )
        return JsonSchema(spec["schema"])
    if kind == "regex":
        return Regex(value.get("pattern", value.get("regex")))
    if kind == "choice":
        return Choice(value.get("choices", value.get("choice")))
    if kind is not None:
        raise ValueError(f"Unknown `response_format` type {kind!r}: {FORMS}.")
    given = [k for k in (*_VLLM, "json_object") if value.get(k) not in (None, False)]
    if len(given) != 1:
        raise ValueError(
            f"`response_format` must set exactly one of {[*_VLLM, 'json_object']}: "
            f"{FORMS}. Received: {value!r}"
        )
    if given[0] == "json_object":
        return JsonObject()
    return _VLLM[given[0]](value[given[0]])


def from_response_format(value):
    """The `StructuredOutput` a response format asks for, or `None`.

    Args:
        value: `None`, a `StructuredOutput`, one format dict (OpenAI's
            `response_format` or vLLM's `structured_outputs`: see `FORMS`)
            for every prompt, or a list of them (or `None`), one per prompt.

    Examples:
    >>> type(from_response_format({"type": "json_object"})).__name__
    'JsonObject'
    >>> from_response_format({"choice": ["a", "b"]}).options
    ['a', 'b']
    """
    if isinstance(value, (list, tuple)):
        constraints = [_one(v) for v in value]
        if all(c is None for c in constraints):
            return None
        return StructuredOutput(constraints)
    return _one(value)
