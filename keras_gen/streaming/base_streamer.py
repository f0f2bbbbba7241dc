"""The streamer interface of `generate(..., streamer=...)`."""


class BaseStreamer:
    """Receives generation as it happens.

    `generate(..., streamer=streamer)` calls `put(chunk)` with a
    `keras_gen.streaming.GenerationOutput` for every chunk of steps, then
    `end()` once, also when generation stops early. An exception raised by
    `put` stops generation.

    Examples:
    >>> class Collector(BaseStreamer):
    ...     def __init__(self):
    ...         self.chunks = []
    ...     def put(self, chunk):
    ...         self.chunks.append(chunk)
    """

    def put(self, chunk):
        raise NotImplementedError

    def end(self):
        pass
