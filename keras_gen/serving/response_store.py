"""The responses a server keeps for `previous_response_id`."""

import collections
import threading

from keras_gen.serving.api_error import APIError

# Responses kept (the oldest dropped first).
MAX_STORED = 256


class ResponseStore:
    """The last `MAX_STORED` responses' conversations, for
    `previous_response_id`: a bounded map, oldest dropped first."""

    def __init__(self, size=MAX_STORED):
        self.size = size
        self._conversations = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, response_id):
        with self._lock:
            if response_id not in self._conversations:
                raise APIError(
                    f"Response '{response_id}' is not kept (this server keeps "
                    f"the last {self.size}).",
                    status=404,
                    param="previous_response_id",
                )
            self._conversations.move_to_end(response_id)
            return list(self._conversations[response_id])

    def put(self, response_id, messages):
        with self._lock:
            self._conversations[response_id] = messages
            while len(self._conversations) > self.size:
                self._conversations.popitem(last=False)
