"""Output that is one of a few strings."""

from keras_gen.kernels.automaton import check_regex_size
from keras_gen.processors.structured_output import StructuredOutput

# Characters with a meaning in outlines-core's (Rust `regex`) syntax.
_SPECIAL = set("\\.+*?()|[]{}^$#&-~")


def escape(text):
    """`text` as a regular expression that matches it literally."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


class Choice(StructuredOutput):
    """Every row's text is exactly one of `options`.

    See `StructuredOutput`.

    Args:
        options: a non-empty list of non-empty strings.

    Examples:
    >>> lm.generate("Is the sky green? Answer:",
    ...             processors=[Choice([" yes", " no"])])  # doctest: +SKIP
    """

    def __init__(self, options):
        if isinstance(options, str) or not isinstance(options, (list, tuple)):
            raise TypeError(
                f"`options` must be a list of strings. Received: {options!r}"
            )
        if not options or not all(isinstance(o, str) and o for o in options):
            raise ValueError(
                "`options` must be a non-empty list of non-empty strings. "
                f"Received: {options!r}"
            )
        self.options = list(options)
        check_regex_size(self.pattern(), "options")

    def pattern(self):
        return "(" + "|".join(escape(option) for option in self.options) + ")"

    def get_config(self):
        return {"options": self.options}
