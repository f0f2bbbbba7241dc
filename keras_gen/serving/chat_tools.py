"""A chat request's messages and tools, read and checked.

OpenAI's chat fields: `messages` (with `tool` roles and assistant
`tool_calls`), `tools`, `tool_choice` and `parallel_tool_calls`.
"""

import json
import re

from keras_gen.serving.api_error import APIError
from keras_gen.streaming import tool_call_parser

ROLES = ("system", "user", "assistant", "tool", "developer")
MAX_TOOLS = 128
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


# Text parts of a message's content: chat's, and the Responses API's.
TEXT_PARTS = ("text", "input_text", "output_text")


def _text(content, where):
    """A message's content as text: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict)
        and part.get("type") in TEXT_PARTS
        and isinstance(part.get("text"), str)
        for part in content
    ):
        return "".join(part["text"] for part in content)
    raise APIError(
        f"Invalid content at {where}: expected a string or an array of text "
        "parts ({'type': 'text', 'text': ...}).",
        param=where,
    )


def _tool_call(call, where):
    """An assistant's earlier tool call, its arguments decoded for the
    template (templates write them with `tojson`)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise APIError(
            f"Invalid tool call at {where}: expected an object with a "
            "'function' holding a 'name' and its 'arguments'.",
            param=where,
        )
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise APIError(
                f"Invalid tool call at {where}: 'arguments' is not JSON.", param=where
            ) from None
    return {**call, "function": {**function, "arguments": arguments}}


def read_messages(messages):
    """The chat's messages, checked, as the template reads them."""
    if messages is None:
        raise APIError("Missing required parameter: 'messages'.", param="messages")
    if not isinstance(messages, list) or not messages:
        raise APIError("'messages' must be a non-empty array.", param="messages")
    read = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise APIError(
                f"Invalid message at {where}: expected an object with a 'role' "
                f"in {list(ROLES)}.",
                param=where,
            )
        message = {key: value for key, value in message.items() if value is not None}
        calls = message.get("tool_calls")
        if calls is not None:
            if message["role"] != "assistant" or not isinstance(calls, list):
                raise APIError(
                    f"Invalid message at {where}: only an assistant's message "
                    "has 'tool_calls', an array.",
                    param=where,
                )
            message["tool_calls"] = [
                _tool_call(call, f"{where}.tool_calls[{j}]")
                for j, call in enumerate(calls)
            ]
        if "content" in message:
            message["content"] = _text(message["content"], f"{where}.content")
        elif calls is None:
            raise APIError(
                f"Invalid message at {where}: 'content' is required.", param=where
            )
        read.append(message)
    return read


def read_tools(body, template_source):
    """`(tools, parser, constraint)` of a chat request: the tools for the
    template (`None` without), the `ToolCallParser` of the template's form
    when the reply may call them, and the structured output of the reply's
    calls (`ToolCallParser.constraint`: forced by `tool_choice`
    `"required"` or a named function, from where the model opens a call
    with `"auto"`), else `None`."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise APIError("'tool_choice' needs 'tools'.", param="tool_choice")
        return None, None, None
    if not isinstance(tools, list) or not 0 < len(tools) <= MAX_TOOLS:
        raise APIError(
            f"'tools' must be an array of 1 to {MAX_TOOLS} tools.", param="tools"
        )
    functions = {}
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            tool.get("type") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not TOOL_NAME.fullmatch(function["name"])
            or not isinstance(function.get("parameters", {}), dict)
        ):
            raise APIError(
                f"Invalid tool at tools[{i}]: expected {{'type': 'function', "
                "'function': {'name': ..., 'parameters': a JSON schema}} with a "
                "name of 1 to 64 letters, digits, '_', '.' or '-'.",
                param=f"tools[{i}]",
            )
        if function["name"] in functions:
            raise APIError(
                f"Two tools are named '{function['name']}'.", param=f"tools[{i}]"
            )
        functions[function["name"]] = function
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise APIError(
            "'parallel_tool_calls' must be a boolean.", param="parallel_tool_calls"
        )
    try:
        tool_call_parser.chosen_functions(tools, choice)
    except (TypeError, ValueError) as error:
        raise APIError(str(error), param="tool_choice") from None
    if choice == "none":
        return tools, None, None
    try:
        parser = tool_call_parser.parser_for(template_source)
    except ValueError as error:
        raise APIError(str(error), param="tools") from None
    try:
        constraint = tool_call_parser.call_constraint(
            template_source, tools, choice, parallel
        )
    except (TypeError, ValueError) as error:
        raise APIError(
            f"A tool's 'parameters' cannot constrain the call: {error}",
            param="tools",
        ) from None
    return tools, parser, constraint
