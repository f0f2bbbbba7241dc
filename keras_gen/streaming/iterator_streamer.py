"""A streamer to iterate over from another thread."""

import queue

from keras_gen.streaming.base_streamer import BaseStreamer

_END = object()


class IteratorStreamer(BaseStreamer):
    """Collects chunks in a queue; iterate over it while generate runs.

    Run `generate(..., streamer=streamer)` in a background thread and
    iterate over the streamer in the foreground (a web handler, a Gradio
    callback). Iteration ends when generation ends.

    Args:
        timeout: seconds to wait for the next chunk before raising
            `queue.Empty`; `None` waits forever.

    Examples:
    >>> import threading
    >>> streamer = IteratorStreamer(timeout=60)
    >>> # threading.Thread(target=lm.generate, args=(prompt,),
    >>> #     kwargs={"max_new_tokens": 20, "streamer": streamer}).start()
    >>> # for chunk in streamer: print(chunk.text[0], end="")
    """

    def __init__(self, timeout=None):
        self.timeout = timeout
        self.queue = queue.Queue()

    def put(self, chunk):
        self.queue.put(chunk)

    def end(self):
        self.queue.put(_END)

    def __iter__(self):
        return self

    def __next__(self):
        chunk = self.queue.get(timeout=self.timeout)
        if chunk is _END:
            raise StopIteration
        return chunk
