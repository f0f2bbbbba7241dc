"""OpenAI's Responses API (`POST /v1/responses`) over the chat endpoint.

A Responses request becomes a chat completions request (its input items
become messages, `instructions` the system message, `text.format` the
`response_format`, its function tools chat tools), runs as one, and its
answer is written back as a response object (`ResponsesStream` writes a
stream's events). Answers are kept, a bounded number of them, for
`previous_response_id` (`ResponseStore`).
"""

import time
import uuid

from keras_gen.serving.api_error import APIError

# Chat fields a Responses request sets under another name.
RENAMED = {"max_tokens": "max_output_tokens", "response_format": "text.format"}
# Fields passed on to the chat request as they are.
SAME_FIELDS = (
    "model", "temperature", "top_p", "stream", "parallel_tool_calls",
    "chat_template_kwargs",
)  # fmt: skip


def new_id(prefix):
    return f"{prefix}_{uuid.uuid4().hex}"


def _messages(items):
    """Chat messages of the input items (the chat request checks them)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise APIError(
            "'input' must be a string or a non-empty array of items.", param="input"
        )
    messages = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message" and isinstance(item.get("role"), str):
            messages.append({"role": item["role"], "content": item.get("content")})
        elif kind == "function_call":
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": item.get("call_id"),
                            "type": "function",
                            "function": {
                                "name": item.get("name"),
                                "arguments": item.get("arguments", "{}"),
                            },
                        }
                    ],
                }
            )
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": item.get("output"),
                }
            )
        else:
            raise APIError(
                f"Invalid item at {where}: expected a message (a 'role' and its "
                "'content'), a function_call or a function_call_output.",
                param=where,
            )
    return messages


def _tools(body):
    """Chat tools and tool_choice of the Responses' flat forms."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    chat = {}
    if tools is not None:
        if not isinstance(tools, list):
            raise APIError("'tools' must be an array.", param="tools")
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise APIError(
                    f"Invalid tool at tools[{i}]: only function tools are served.",
                    param=f"tools[{i}]",
                )
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    key: tool[key]
                    for key in ("name", "description", "parameters")
                    if key in tool
                },
            }
            for tool in tools
        ]
    if isinstance(choice, dict) and choice.get("type") == "function":
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    if choice is not None:
        chat["tool_choice"] = choice
    return chat


def _format(body):
    """`response_format` of `text.format`, or `None`."""
    text = body.get("text")
    if text is None:
        return None
    form = text.get("format") if isinstance(text, dict) else None
    if not isinstance(form, dict) or form.get("type") not in (
        "text",
        "json_object",
        "json_schema",
    ):
        raise APIError(
            "'text.format' must be {'type': 'text'}, {'type': 'json_object'} or "
            "{'type': 'json_schema', 'name': ..., 'schema': ...}.",
            param="text.format",
        )
    if form["type"] == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {
                "name": form.get("name", "output"),
                "schema": form.get("schema"),
            },
        }
    return {"type": form["type"]}


class ResponsesRequest:
    """One Responses request as a chat completions request.

    Args:
        body: the decoded JSON object.
        store: the server's `ResponseStore`.

    Attributes:
        chat: the chat completions body to run.
        messages: the conversation so far (earlier responses' included).
    """

    def __init__(self, body, store):
        if not isinstance(body, dict):
            raise APIError("The request body must be a JSON object.")
        if "input" not in body:
            raise APIError("Missing required parameter: 'input'.", param="input")
        messages = _messages(body["input"])
        previous = body.get("previous_response_id")
        if previous is not None:
            messages = store.get(previous) + messages
        self.messages = messages
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise APIError("'instructions' must be a string.", param="instructions")
        system = [{"role": "system", "content": instructions}] if instructions else []
        self.chat = {
            **{key: body[key] for key in SAME_FIELDS if key in body},
            "messages": system + messages,
            **_tools(body),
        }
        if body.get("max_output_tokens") is not None:
            self.chat["max_tokens"] = body["max_output_tokens"]
        response_format = _format(body)
        if response_format is not None:
            self.chat["response_format"] = response_format
        self.id = new_id("resp")
        self.created = int(time.time())
        self.body = body

    def renamed(self, error):
        """`error`, an `APIError` of the chat request, naming this request's
        fields (`max_output_tokens`, `text.format`, `input`)."""
        param = error.param or ""
        name = "input" if param.startswith("messages") else RENAMED.get(param, param)
        message = error.message
        for chat, own in RENAMED.items():
            message = message.replace(f"'{chat}'", f"'{own}'").replace(
                f"`{chat}`", f"`{own}`"
            )
        error.param, error.message = name or None, message
        return error

    def response(self, completion, status="completed"):
        """The response object of a chat completion's answer."""
        choice = completion["choices"][0]
        message = choice["message"]
        output = []
        if message.get("reasoning_content"):
            output.append(
                {
                    "type": "reasoning",
                    "id": new_id("rs"),
                    "summary": [],
                    "content": [
                        {"type": "reasoning_text", "text": message["reasoning_content"]}
                    ],
                }
            )
        if message.get("content") is not None:
            output.append(message_item(new_id("msg"), message["content"]))
        for call in message.get("tool_calls") or []:
            output.append(call_item(call))
        incomplete = choice["finish_reason"] == "length"
        usage = completion["usage"]
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "model": completion["model"],
            "status": "incomplete" if incomplete and status == "completed" else status,
            "incomplete_details": (
                {"reason": "max_output_tokens"} if incomplete else None
            ),
            "instructions": self.body.get("instructions"),
            "max_output_tokens": self.body.get("max_output_tokens"),
            "previous_response_id": self.body.get("previous_response_id"),
            "temperature": self.body.get("temperature"),
            "top_p": self.body.get("top_p"),
            "tools": self.body.get("tools") or [],
            "tool_choice": self.body.get("tool_choice", "auto"),
            "parallel_tool_calls": self.body.get("parallel_tool_calls", True),
            "text": self.body.get("text") or {"format": {"type": "text"}},
            "output": output,
            "usage": {
                "input_tokens": usage["prompt_tokens"],
                "output_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"],
            },
            "error": None,
        }

    def conversation(self, response):
        """The messages a later `previous_response_id` continues from."""
        said = {"role": "assistant", "content": ""}
        calls = []
        for item in response["output"]:
            if item["type"] == "message":
                said["content"] += item["content"][0]["text"]
            elif item["type"] == "function_call":
                calls.append(
                    {
                        "id": item["call_id"],
                        "type": "function",
                        "function": {
                            "name": item["name"],
                            "arguments": item["arguments"],
                        },
                    }
                )
        if calls:
            said["tool_calls"] = calls
        return self.messages + [said]


def message_item(item_id, text, status="completed"):
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call_item(call):
    return {
        "type": "function_call",
        "id": new_id("fc"),
        "call_id": call["id"],
        "name": call["function"]["name"],
        "arguments": call["function"]["arguments"],
        "status": "completed",
    }
