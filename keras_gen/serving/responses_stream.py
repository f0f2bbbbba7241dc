"""The Responses API's stream events, of a chat completion's chunks."""

from keras_gen.serving.responses_request import message_item
from keras_gen.serving.responses_request import new_id


class ResponsesStream:
    """The Responses stream's events of a chat completion's chunks: the
    response created, its text as `response.output_text.delta` events in
    one message item, function calls as items, then the response
    completed (with what `ResponsesRequest.response` returns)."""

    def __init__(self, request):
        self.request = request
        self.sequence = 0
        self.text = ""
        self.message_id = None
        self.message_index = 0
        self.calls = []
        self.reasoning = ""

    def _event(self, kind, **fields):
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence, **fields}

    def _open_message(self):
        self.message_id = new_id("msg")
        self.message_index = 1 if self.reasoning else 0  # after the reasoning
        item = message_item(self.message_id, "", "in_progress")
        item["content"] = []
        return [
            self._event(
                "response.output_item.added", output_index=self.message_index, item=item
            ),
            self._event(
                "response.content_part.added",
                item_id=self.message_id,
                output_index=self.message_index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            ),
        ]

    def events(self, chunk):
        """The events of one chat chunk (or error object)."""
        if "error" in chunk:
            return [self._event("error", **chunk["error"])]
        events = []
        if self.sequence == 0:
            started = self._response("in_progress", chunk)
            events += [
                self._event("response.created", response=started),
                self._event("response.in_progress", response=started),
            ]
        for choice in chunk.get("choices", []):
            delta = choice.get("delta", {})
            self.reasoning += delta.get("reasoning_content") or ""
            if delta.get("content"):
                if self.message_id is None:
                    events += self._open_message()
                self.text += delta["content"]
                events.append(
                    self._event(
                        "response.output_text.delta",
                        item_id=self.message_id,
                        output_index=self.message_index,
                        content_index=0,
                        delta=delta["content"],
                    )
                )
            self.calls += delta.get("tool_calls") or []
        return events

    def _response(self, status, chunk, finish_reason=None, usage=None):
        message = {"content": self.text if self.message_id else None}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.calls:
            message["tool_calls"] = self.calls
        completion = {
            "model": chunk["model"],
            "choices": [{"message": message, "finish_reason": finish_reason}],
            "usage": usage
            or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        return self.request.response(completion, status)

    def finish(self, last_chunk, finish_reason, usage):
        """The closing events, and the completed response."""
        events = []
        response = self._response("completed", last_chunk, finish_reason, usage)
        if self.message_id is not None:
            events += [
                self._event(
                    "response.output_text.done",
                    item_id=self.message_id,
                    output_index=self.message_index,
                    content_index=0,
                    text=self.text,
                ),
                self._event(
                    "response.content_part.done",
                    item_id=self.message_id,
                    output_index=self.message_index,
                    content_index=0,
                    part={"type": "output_text", "text": self.text, "annotations": []},
                ),
            ]
        for index, item in enumerate(response["output"]):
            if item["type"] == "message":
                item["id"] = self.message_id
            if item["type"] != "message":
                events.append(
                    self._event(
                        "response.output_item.added", output_index=index, item=item
                    )
                )
            events.append(
                self._event("response.output_item.done", output_index=index, item=item)
            )
        kind = (
            "response.completed"
            if response["status"] == "completed"
            else ("response.incomplete")
        )
        events.append(self._event(kind, response=response))
        return events, response
