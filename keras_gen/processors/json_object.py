"""Output that is a JSON object."""

from keras_gen.kernels.json_schema import schema_regex
from keras_gen.processors.structured_output import StructuredOutput


class JsonObject(StructuredOutput):
    """Every row's text is a JSON object (OpenAI's `json_object` format).

    Any keys and values, nested a few levels deep (as outlines-core's
    schema `{"type": "object"}` allows). See `StructuredOutput`.

    Examples:
    >>> lm.generate("Describe a cat in JSON:",
    ...             processors=[JsonObject()])  # doctest: +SKIP
    """

    def __init__(self):
        pass  # no arguments (not `StructuredOutput`'s list)

    def pattern(self):
        return schema_regex({"type": "object"})
