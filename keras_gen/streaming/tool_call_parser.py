"""Tool calls in a reply's text, in the form the model's template writes."""

import json
import re

from keras_gen.kernels.json_schema import schema_regex
from keras_gen.processors.choice import escape
from keras_gen.processors.regex import Regex
from keras_gen.processors.triggered import Triggered
from keras_gen.streaming.reasoning_splitter import partial_tag_length

# The forms, by what the chat template writes: Hermes / Qwen
# (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`), Mistral
# (`[TOOL_CALLS] [{"name": ..., "arguments": ...}]`) and Llama 3 (a JSON
# object `{"name": ..., "parameters": ...}`, after `<|python_tag|>` or
# alone).
HERMES, MISTRAL, LLAMA3 = "hermes", "mistral", "llama3_json"
_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_PYTHON_TAG = "<|python_tag|>"


def _call(value, arguments_key):
    """`{"name", "arguments"}` of a decoded call, or `None`."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get(arguments_key, value.get("arguments", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return {"name": value["name"], "arguments": arguments}


def _decode(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


class ToolCallParser:
    """Finds the tool calls in a reply, in one model family's form.

    Args:
        form: `"hermes"` (Qwen, Hermes: `<tool_call>` blocks), `"mistral"`
            (`[TOOL_CALLS]` and a JSON list) or `"llama3_json"` (a JSON
            object with `name` and `parameters`).

    Examples:
    >>> parser = ToolCallParser("hermes")
    >>> parser.parse('<tool_call>\\n{"name": "f", "arguments": {"x": 1}}\\n</tool_call>')
    (None, [{'name': 'f', 'arguments': {'x': 1}}])
    >>> parser.parse("No call here.")
    ('No call here.', [])
    """

    def __init__(self, form):
        if form not in (HERMES, MISTRAL, LLAMA3):
            raise ValueError(
                f"`form` must be one of {[HERMES, MISTRAL, LLAMA3]}. Received: {form!r}"
            )
        self.form = form

    @classmethod
    def for_template(cls, template_source):
        """The parser for what a chat template writes, or `None` when it
        writes no tool calls that keras-gen reads."""
        if "<tool_call>" in template_source:
            return cls(HERMES)
        if "[TOOL_CALLS]" in template_source:
            return cls(MISTRAL)
        if "<|start_header_id|>" in template_source and "tools" in template_source:
            return cls(LLAMA3)
        return None

    def content_length(self, text):
        """How much of `text`, a reply still streaming, is certainly content:
        everything before a call starts, or may be starting."""
        start = text.find(self.opener)
        if start >= 0:
            return start
        return len(text) - partial_tag_length(text, self.opener)

    def parse(self, text):
        """`(content, calls)`: the text around the calls (`None` when it is
        only white space) and each call's `{"name", "arguments"}`. A call
        that is not valid JSON is left in the content, as text."""
        if self.form == HERMES:
            calls, kept = [], []
            last = 0
            for match in _HERMES_CALL.finditer(text):
                call = _call(_decode(match.group(1)), "arguments")
                if call is not None:
                    calls.append(call)
                    kept.append(text[last : match.start()])
                    last = match.end()
            content = "".join(kept) + text[last:]
        elif self.form == MISTRAL:
            before, found, after = text.partition("[TOOL_CALLS]")
            value = _decode(after.strip()) if found else None
            value = [value] if isinstance(value, dict) else value
            calls = [_call(v, "arguments") for v in value or []]
            if not calls or None in calls:
                calls, before = [], text
            content = before
        else:
            body = text.strip()
            body = body[len(_PYTHON_TAG) :] if body.startswith(_PYTHON_TAG) else body
            whole = _call(_decode(body), "parameters")
            parts = (
                [whole]
                if whole
                else [_call(_decode(p), "parameters") for p in body.split(";")]
            )
            calls = [] if None in parts or not body.startswith("{") else parts
            content = "" if calls else text
        return (content if content.strip() else None), calls

    @property
    def opener(self):
        """The text that opens a reply's calls (Llama 3's is the call's own
        first character)."""
        return {HERMES: "<tool_call>", MISTRAL: "[TOOL_CALLS]", LLAMA3: "{"}[self.form]

    def constraint(self, functions, forced=False, parallel=True):
        """The structured output of a reply that may (or, `forced`, must)
        call `functions`, in this form, each call's arguments valid under
        its function's JSON schema.

        The text after the opener is constrained from the moment the model
        writes it (a `keras_gen.processors.Triggered`): one call, or with
        `parallel` one or more, and then the end of the reply. A forced
        reply starts with the opener; otherwise Hermes and Mistral calls may
        follow some text, and a Llama 3 reply is a call when it starts with
        `{`.

        Args:
            functions: OpenAI's `function` objects (`{"name",
                "parameters"}`), as `chosen_functions` returns them.
            forced: bool, the reply must call one of them.
            parallel: bool, the reply may hold more than one call.

        Raises:
            ValueError: a schema outlines-core cannot compile, or calls too
                large to constrain.
        """
        arguments_key = "parameters" if self.form == LLAMA3 else "arguments"

        def calls(opened):
            """Each function's call as one alternative, without its `{`
            when `opened`."""
            return (
                "(?:"
                + "|".join(
                    ("" if opened else r"\{")
                    + escape(f'"name": "{function["name"]}", "{arguments_key}": ')
                    + schema_regex(function.get("parameters") or {"type": "object"})
                    + r"\}"
                    for function in functions
                )
                + ")"
            )

        call = calls(opened=False)
        if self.form == HERMES:
            block = rf"\n{call}\n</tool_call>"
            after = block + (rf"(?:[ \n]*<tool_call>{block})*" if parallel else "")
        elif self.form == MISTRAL:
            after = r" ?\[" + call + (f"(?:, {call})*" if parallel else "") + r"\]"
        else:
            after = calls(opened=True) + (f"(?:; ?{call})*" if parallel else "")
        return Triggered(
            Regex(after),
            self.opener,
            at_start=forced or self.form == LLAMA3,
            required=forced,
        )


def chosen_functions(tools, tool_choice):
    """The functions (OpenAI's `function` objects of `tools`) a reply must
    call one of under `tool_choice`: all for `"required"`, the named one
    for `{"type": "function", "function": {"name": ...}}`; `None` for
    `"auto"`, `"none"` or `None` (the reply is free).

    Raises:
        TypeError: `tools` is not a list of function tools.
        ValueError: a choice without tools, a name not among them, or
            another value.
    """
    if tool_choice in (None, "auto", "none"):
        return None
    if not tools:
        raise ValueError("`tool_choice` needs `tools`.")
    if not isinstance(tools, (list, tuple)) or not all(
        isinstance(tool, dict)
        and isinstance(tool.get("function"), dict)
        and isinstance(tool["function"].get("name"), str)
        for tool in tools
    ):
        raise TypeError(
            '`tools` must be a list of {"type": "function", "function": {"name": '
            f'..., "parameters": ...}}}} dicts. Received: {tools!r:.200}'
        )
    functions = {tool["function"]["name"]: tool["function"] for tool in tools}
    if tool_choice == "required":
        return list(functions.values())
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        if name not in functions:
            raise ValueError(
                f"`tool_choice` names no tool of `tools` ({sorted(functions)}). "
                f"Received: {name!r}"
            )
        return [functions[name]]
    raise ValueError(
        '`tool_choice` must be "auto", "none", "required" or '
        '{"type": "function", "function": {"name": ...}}. '
        f"Received: {tool_choice!r:.200}"
    )


def parser_for(template_source):
    """`ToolCallParser.for_template`, or a `ValueError` saying the template
    writes no call form keras-gen reads."""
    parser = ToolCallParser.for_template(template_source)
    if parser is None:
        raise ValueError(
            "This model's chat template writes no tool calls that keras-gen "
            "reads (Hermes and Qwen's <tool_call>, Mistral's [TOOL_CALLS], "
            "Llama 3's JSON)."
        )
    return parser


def call_constraint(template_source, tools, tool_choice, parallel=True):
    """The structured output of a reply under `tool_choice`
    (`ToolCallParser.constraint` of the template's form): one or more calls
    of the `chosen_functions` with `"required"` or a named function, calls
    of any tool from where the model opens one with `"auto"` (or `None`);
    `None` without tools, with `"none"`, or (`"auto"`) a template that
    writes no calls keras-gen reads or tools too large to constrain (their
    calls are then only parsed).

    Raises:
        TypeError, ValueError: see `chosen_functions`, `parser_for` and
            `ToolCallParser.constraint`.
    """
    chosen = chosen_functions(tools, tool_choice)
    if chosen is not None:
        parser = parser_for(template_source)
        return parser.constraint(chosen, forced=True, parallel=parallel)
    if not tools or tool_choice == "none":
        return None
    parser = ToolCallParser.for_template(template_source)
    if parser is None:
        return None
    functions = chosen_functions(tools, "required")
    try:
        return parser.constraint(functions, parallel=parallel)
    except ValueError:
        return None
