"""A request on its way through the scheduler, and the events it gets back."""

import asyncio
import threading


class GenerationJob:
    """Carries one `CompletionRequest` from the HTTP handler to a batch.

    The scheduler's worker thread calls `put` with events; the handler's
    event loop reads them with `events()`. Events are dicts:

    - `{"type": "chunk", "rows": [...]}`: per row of the request (each
      prompt `n` times), what it produced since the last chunk: `text`,
      `token_ids`, `log_probs` (or `None`), `top_logprobs` (or `None`) and
      `finish_reason` (`None` while it runs, else `"stop"` or `"length"`).
    - `{"type": "done"}`: every row has ended.
    - `{"type": "error", "error": APIError}`.

    `cancel()` (a client went away) tells the scheduler to stop generating
    for it.

    Args:
        request: a `keras_gen.serving.CompletionRequest`.
        loop: the asyncio event loop that reads the events.
    """

    def __init__(self, request, loop):
        self.request = request
        self.loop = loop
        self.queue = asyncio.Queue()
        self._cancelled = threading.Event()
        self.done = False

    @property
    def cancelled(self):
        return self._cancelled.is_set()

    def cancel(self):
        self._cancelled.set()

    def put(self, event):
        """Send an event to the handler (safe from any thread)."""
        if event["type"] in ("done", "error"):
            self.done = True
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:
            # The event loop is closed: the server is shutting down.
            self.cancel()

    async def events(self):
        """The events, until `"done"` or `"error"` (inclusive)."""
        while True:
            event = await self.queue.get()
            yield event
            if event["type"] in ("done", "error"):
                return
