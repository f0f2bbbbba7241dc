"""The responses a server keeps for `previous_response_id`."""

import collections
import json
import threading

from keras_gen.serving.api_error import APIError

# Responses kept, and the characters of their conversations (JSON) kept in
# all; the least recently used are dropped first.
MAX_STORED = 256
MAX_STORED_CHARS = 1 << 25


class ResponseStore:
    """The last responses' conversations, for `previous_response_id`: at
    most `size` of them and `max_chars` characters of JSON in all (a
    conversation longer than that is not kept), the least recently used
    dropped first."""

    def __init__(self, size=MAX_STORED, max_chars=MAX_STORED_CHARS):
        self.size, self.max_chars = size, max_chars
        self._conversations = collections.OrderedDict()  # id -> (messages, chars)
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, response_id):
        with self._lock:
            if response_id not in self._conversations:
                raise APIError(
                    f"Response '{response_id}' is not kept (this server keeps "
                    f"the last {self.size}, {self.max_chars} characters in all).",
                    status=404,
                    param="previous_response_id",
                )
            self._conversations.move_to_end(response_id)
            return list(self._conversations[response_id][0])

    def put(self, response_id, messages):
        chars = len(json.dumps(messages))
        with self._lock:
            self._conversations[response_id] = (messages, chars)
            self._chars += chars
            while self._conversations and (
                len(self._conversations) > self.size or self._chars > self.max_chars
            ):
                _, (_, dropped) = self._conversations.popitem(last=False)
                self._chars -= dropped
