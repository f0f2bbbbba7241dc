"""Output that is free until a trigger text, and constrained after it."""

from keras_gen.kernels.triggers import MAX_TRIGGER_BYTES
from keras_gen.kernels.triggers import triggered
from keras_gen.processors.regex import Regex
from keras_gen.processors.structured_output import StructuredOutput
from keras_gen.processors.structured_output import kinds

# The tags a thinking template writes around its reasoning.
THINK_START, THINK_END = "<think>", "</think>"
# White space an answer may start with after the thinking.
_SPACE = r"[ \t\r\n]*"


class Triggered(StructuredOutput):
    """The text is free until it holds `trigger`; what follows the
    trigger is held to `constraint`.

    A tool call is constrained from the moment the model opens it (its
    template's `<tool_call>`), an answer after the model's thinking
    (`</think>`). A token that runs past the trigger is allowed when the
    bytes after the trigger are one token `constraint` allows at its start.
    Special tokens have no text and never complete a trigger. The waiting
    costs as much as any structured output: a mask and a state per
    row in the compiled loop. See `StructuredOutput`.

    Args:
        constraint: the structured output of the text after the trigger
            (`JsonSchema(...)`, `Regex(...)`, another `Triggered`, ...).
        trigger: the text that starts it, 1 to 64 UTF-8 bytes.
        at_start: bool. `False`: the trigger may come after any text.
            `True`: the text starts with it (after white space), or else
            follows `otherwise`.
        required: bool, the text may not end before the trigger (with
            `at_start` and no `otherwise`: it must start with it).
        otherwise: with `at_start`, the structured output of a text that
            does not start with the trigger; `None`: such a text is free.

    Examples:
    >>> from keras_gen.processors import JsonSchema
    >>> answer = Triggered(JsonSchema({"type": "integer"}), "Answer: ",
    ...                    required=True)
    >>> lm.generate("Think, then answer. 2 + 2?",
    ...             processors=[answer])  # doctest: +SKIP
    """

    def __init__(
        self, constraint, trigger, at_start=False, required=False, otherwise=None
    ):
        for name, value in (("constraint", constraint), ("otherwise", otherwise)):
            if (value is not None or name == "constraint") and (
                not isinstance(value, StructuredOutput) or value.constraints is not None
            ):
                raise TypeError(
                    f"`{name}` must be a structured output of one constraint "
                    "(JsonSchema, JsonObject, Regex, Choice or Triggered). "
                    f"Received: {value!r:.200}"
                )
        if not isinstance(trigger, str) or not (
            0 < len(trigger.encode()) <= MAX_TRIGGER_BYTES
        ):
            raise ValueError(
                f"`trigger` must be text of 1 to {MAX_TRIGGER_BYTES} UTF-8 "
                f"bytes. Received: {trigger!r:.200}"
            )
        if otherwise is not None and not at_start:
            raise ValueError(
                "`otherwise` is the form of a text that does not start with "
                "the trigger: it needs `at_start=True`."
            )
        self.constraint = constraint
        self.trigger = trigger
        self.at_start = bool(at_start)
        self.required = bool(required)
        self.otherwise = otherwise

    def automaton(self, tokenizer, vocabulary_size):
        return triggered(
            self.trigger,
            self.constraint.automaton(tokenizer, vocabulary_size),
            tokenizer,
            vocabulary_size,
            at_start=self.at_start,
            required=self.required,
            otherwise=(
                None
                if self.otherwise is None
                else self.otherwise.automaton(tokenizer, vocabulary_size)
            ),
        )

    @classmethod
    def after_thinking(cls, constraint, thinking):
        """`constraint` for the answer of a model that thinks first: free
        inside `<think>...</think>`, constrained after it.

        Args:
            constraint: the structured output of the answer. The reply may
                end inside the thinking only when `constraint` lets it end
                before its own trigger (a `Triggered` that is not
                `required`: a tool call the model may make).
            thinking: `True` when the prompt opened the thinking (the reply
                starts inside it); `False` when the reply may open it.
        """
        required = getattr(constraint, "required", True)
        if isinstance(constraint, Triggered):
            answer = constraint  # it waits (or skips white space) itself
        else:
            answer = Regex(f"{_SPACE}(?:{constraint.pattern()})")
        closed = cls(answer, THINK_END, required=required)
        if thinking:
            return closed
        return cls(closed, THINK_START, at_start=True, otherwise=constraint)

    def get_config(self):
        def config(value):
            if value is None:
                return None
            return {"class": type(value).__name__, "config": value.get_config()}

        return {
            "constraint": config(self.constraint),
            "trigger": self.trigger,
            "at_start": self.at_start,
            "required": self.required,
            "otherwise": config(self.otherwise),
        }

    @classmethod
    def from_config(cls, config):
        by_name = {kind.__name__: kind for kind in kinds()}

        def read(value):
            if value is None:
                return None
            return by_name[value["class"]].from_config(value["config"])

        return cls(
            read(config["constraint"]),
            config["trigger"],
            at_start=config["at_start"],
            required=config["required"],
            otherwise=read(config["otherwise"]),
        )
