"""One request inside an `Engine`: its chunks, its result, its cancel."""

import asyncio
import collections
import threading

from keras_gen.streaming.generation_output import GenerationOutput

_END = object()


class RequestCancelled(RuntimeError):
    """`result()` of a request cancelled before its first token."""


class GenerationHandle:
    """What `Engine.submit` returns: the chunks of one request as they come.

    Iterate over it (in a thread, or with `async for` in an event loop) for
    `keras_gen.streaming.GenerationOutput` chunks: per row of the request,
    the tokens, text and requested per-step outputs since the previous
    chunk and the finish reason of rows that ended. `result()` waits for
    the end and returns the chunks joined: what `CausalLM.generate(...,
    return_dict=True)` returns for the same request alone. `cancel()`
    stops generating for it; its slots free at the engine's next chunk.

    A request that cannot finish (the engine was closed, or generation
    failed) raises the error from the iteration and from `result()`; the
    `result()` of a request cancelled before its first token raises
    `RequestCancelled` (after that, it holds what came, with the finish
    reason `"cancelled"`).

    Examples:
    >>> handle = engine.submit("The for statement", max_new_tokens=16)  # doctest: +SKIP
    >>> for chunk in handle:  # doctest: +SKIP
    ...     print(chunk.text[0], end="")
    >>> engine.submit("A class").result().text  # doctest: +SKIP
    """

    def __init__(self, rows):
        self.rows = rows
        self._chunks = []
        self._pending = collections.deque()
        self._condition = threading.Condition()
        self._async = None  # (event loop, asyncio.Event) once awaited
        self._error = None
        self._done = False
        self._cancelled = threading.Event()
        self._read = False

    # Called by the engine's thread.

    def put(self, chunk):
        self._deliver(chunk)

    def finish(self, error=None):
        """End the request (with `error`, if any); later calls do nothing."""
        with self._condition:  # re-entrant: `_deliver` takes it too
            if self._done:
                return
            self._error = error
            self._deliver(_END)

    def _deliver(self, item):
        with self._condition:
            if item is _END:
                self._done = True
            else:
                self._chunks.append(item)
            self._pending.append(item)
            self._condition.notify_all()
            waiter = self._async
        if waiter is not None:
            loop, event = waiter
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the event loop is closed
                self.cancel()

    # Called by the client.

    @property
    def done(self):
        return self._done

    @property
    def cancelled(self):
        return self._cancelled.is_set()

    def cancel(self):
        """Stop generating for this request (the engine frees its slots)."""
        self._cancelled.set()

    def __iter__(self):
        while True:
            with self._condition:
                while not self._pending:
                    self._condition.wait()
                item = self._pending.popleft()
            if item is _END:
                if self._error is not None:
                    raise self._error
                return
            yield item

    async def __aiter__(self):
        event = asyncio.Event()
        with self._condition:
            self._async = (asyncio.get_running_loop(), event)
        while True:
            with self._condition:
                item = self._pending.popleft() if self._pending else None
                if item is None:
                    event.clear()
            if item is None:
                await event.wait()
                continue
            if item is _END:
                if self._error is not None:
                    raise self._error
                return
            yield item

    def result(self, timeout=None):
        """The whole record (waits for the request to end)."""
        with self._condition:
            if not self._condition.wait_for(lambda: self._done, timeout):
                raise TimeoutError("The request did not finish in time.")
        if self._error is not None:
            raise self._error
        if not self._chunks:  # cancelled before anything came
            raise RequestCancelled("The request was cancelled before its first token.")
        record = GenerationOutput.join(self._chunks)
        if self.cancelled:  # rows the cancel cut
            record.finish_reasons = [r or "cancelled" for r in record.finish_reasons]
        return record
