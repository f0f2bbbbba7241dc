"""A streamer for asyncio servers."""

import asyncio

from keras_gen.streaming.base_streamer import BaseStreamer

_END = object()


class AsyncIteratorStreamer(BaseStreamer):
    """Chunks for `async for`, filled by generate running in a worker thread.

    Create it inside the event loop, run `generate(..., streamer=streamer)`
    in an executor (`loop.run_in_executor`), and `async for` over it.

    Args:
        timeout: seconds to wait for the next chunk before raising
            `TimeoutError`; `None` waits forever.

    Examples:
    >>> async def handler(lm, prompt):  # doctest: +SKIP
    ...     streamer = AsyncIteratorStreamer()
    ...     loop = asyncio.get_running_loop()
    ...     task = loop.run_in_executor(None, lambda: lm.generate(
    ...         prompt, max_new_tokens=20, streamer=streamer))
    ...     async for chunk in streamer:
    ...         print(chunk.text[0], end="")
    ...     await task
    """

    def __init__(self, timeout=None):
        self.timeout = timeout
        self.queue = asyncio.Queue()
        self.loop = asyncio.get_running_loop()

    def put(self, chunk):
        self.loop.call_soon_threadsafe(self.queue.put_nowait, chunk)

    def end(self):
        self.loop.call_soon_threadsafe(self.queue.put_nowait, _END)

    def __aiter__(self):
        return self

    async def __anext__(self):
        chunk = await asyncio.wait_for(self.queue.get(), self.timeout)
        if chunk is _END:
            raise StopAsyncIteration
        return chunk
