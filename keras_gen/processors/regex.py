"""Output that matches a regular expression."""

from keras_gen.kernels.automaton import check_regex
from keras_gen.processors.structured_output import StructuredOutput


class Regex(StructuredOutput):
    """Every row's text matches `pattern` as a whole.

    The syntax is outlines-core's (that of Rust's `regex` crate: classes,
    repetitions, alternatives, `\\d`, `\\w`, Unicode classes; no
    look-around or back-references). See `StructuredOutput`.

    Args:
        pattern: a regular expression (one that does not compile is a
            `ValueError`).

    Examples:
    >>> lm.generate("Phone:", processors=[Regex(r"\\d{3}-\\d{4}")])  # doctest: +SKIP
    """

    def __init__(self, pattern):
        if not isinstance(pattern, str) or not pattern:
            raise TypeError(
                f"`pattern` must be a non-empty string. Received: {pattern!r}"
            )
        self.regex = check_regex(pattern)

    def pattern(self):
        return self.regex

    def get_config(self):
        return {"pattern": self.regex}
