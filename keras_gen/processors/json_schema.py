"""Output that is JSON valid under a JSON schema."""

import copy

from keras_gen.kernels.automaton import check_regex
from keras_gen.kernels.json_schema import schema_regex
from keras_gen.processors.structured_output import StructuredOutput
from keras_gen.utils.files import parse_json


class JsonSchema(StructuredOutput):
    """Every row's text is JSON that validates against `schema`.

    The schema becomes a regular expression with outlines-core (objects,
    required and optional properties, arrays with `minItems`/`maxItems`,
    enums and consts, strings with `pattern`, `minLength`, `maxLength` and
    `format`, `anyOf`, `$ref`), plus integer and number bounds
    (`minimum`, `maximum` and their exclusive forms), which outlines-core
    leaves out. Numbers under bounds are written without exponent, and a
    fractional bound of a number is moved inwards to an integer. At most
    one space separates JSON tokens. See `StructuredOutput`.

    Args:
        schema: a JSON schema, as a dict or a JSON string.

    Raises:
        ValueError: the schema is not JSON or cannot be compiled (the
            message says what outlines-core found).

    Examples:
    >>> schema = {"type": "object", "properties": {
    ...     "name": {"type": "string", "maxLength": 20},
    ...     "age": {"type": "integer", "minimum": 0, "maximum": 150}},
    ...     "required": ["name", "age"]}
    >>> lm.generate("A person:", processors=[JsonSchema(schema)])  # doctest: +SKIP
    """

    def __init__(self, schema):
        if isinstance(schema, str):
            schema = parse_json(schema, "`schema`")
        if not isinstance(schema, dict):
            raise TypeError(f"`schema` must be a dict. Received: {schema!r}")
        try:
            self.schema = copy.deepcopy(schema)
            # Raises for a bad schema, or a `pattern` in it that cannot compile.
            self._pattern = check_regex(schema_regex(self.schema), "schema")
        except RecursionError:
            raise ValueError("`schema` nests too deeply.") from None

    def pattern(self):
        return self._pattern

    def get_config(self):
        return {"schema": self.schema}
