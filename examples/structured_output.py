"""Structured output: JSON that validates, regexes, choices, per prompt.

python examples/structured_output.py
"""

import argparse
import json

import keras_gen
from keras_gen.processors import Choice
from keras_gen.processors import JsonSchema
from keras_gen.processors import Regex
from keras_gen.processors import StructuredOutput

# `--help` shows the docstring; the example takes no arguments.
argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
).parse_args()

lm = keras_gen.CausalLM.from_preset("demo")
schema = {
    "type": "object",
    "properties": {
        "statement": {"enum": ["for", "while", "with", "try"]},
        "lines": {"type": "integer", "minimum": 1, "maximum": 20},
        "nested": {"type": "boolean"},
    },
    "required": ["statement", "lines", "nested"],
}
# The demo model knows nothing of JSON: every row parses all the same.
texts = lm.generate(
    ["A statement:", "Another one:"],
    processors=[JsonSchema(schema)],
    seed=0,
    max_new_tokens=60,
    strip_prompt=True,
)
for text in texts:
    print(json.loads(text))

# Each prompt its own constraint (None: free text), in one batch.
mixed = StructuredOutput([Choice(["yes", "no"]), Regex(r"[0-9]{2}:[0-9]{2}"), None])
print(
    lm.generate(
        ["Is it?", "The time:", "The for statement"],
        processors=[mixed],
        seed=1,
        max_new_tokens=24,
        strip_prompt=True,
    )
)

# The same as an option, in OpenAI's form (the server reads it too).
print(
    lm.generate(
        "A statement:",
        seed=2,
        max_new_tokens=60,
        strip_prompt=True,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": schema},
        },
    )
)
