"""A reply's text as the assistant message a chat history holds."""

from keras_gen.streaming.reasoning_splitter import ReasoningSplitter


def assistant_message(text, thinking=None, parser=None):
    """The assistant message of a whole reply: `{"role": "assistant",
    "content": ...}`, with `"reasoning_content"` when the template thinks
    and `"tool_calls"` when the reply calls tools.

    The message goes back into the conversation as it is (the chat
    templates read `reasoning_content` and `tool_calls`); calls are in the
    form transformers' templates take, `{"type": "function", "function":
    {"name": ..., "arguments": {...}}}` (the arguments a dict).

    Args:
        text: the reply's text.
        thinking: `reply_thinking` of the prompt: `None` when the template
            does not think, else whether the reply starts inside the tags.
        parser: a `ToolCallParser` when the reply may call tools, else
            `None`.
    """
    message = {"role": "assistant"}
    if thinking is not None:
        splitter = ReasoningSplitter(thinking)
        parts = [splitter.feed(text), splitter.finish()]
        message["reasoning_content"] = "".join(reasoning for reasoning, _ in parts)
        text = "".join(content for _, content in parts)
    calls = []
    if parser is not None:
        content, calls = parser.parse(text)
        text = text if not calls else content
    message["content"] = text
    if calls:
        message["tool_calls"] = [{"type": "function", "function": c} for c in calls]
    return message
