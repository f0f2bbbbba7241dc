"""Batches concurrent requests into compiled generate calls."""

import collections
import threading
import time

import numpy as np

from keras_gen.serving.api_error import APIError


def _top_logprobs(scores, count):
    """Per step, the `count` most likely `(token_id, log_prob)` pairs."""
    scores = np.asarray(scores, "float64")
    log_probs = scores - np.logaddexp.reduce(scores, axis=-1, keepdims=True)
    top = np.argsort(-log_probs, axis=-1, kind="stable")[:, :count]
    return [
        [(int(t), float(log_probs[step, t])) for t in top[step]]
        for step in range(len(top))
    ]


class BatchScheduler:
    """Runs queued `GenerationJob`s as batches on worker threads.

    A worker takes the oldest waiting job, waits up to `batch_wait_seconds`
    for more jobs with the same `batch_key` (up to `max_batch_size` rows),
    and runs them as the rows of one compiled stream. Chunks go back to
    each job as they come. With `num_workers` workers, that many batches
    run at once, so a request never waits for an unrelated long batch
    while a worker is free. A batch whose clients have all gone stops
    generating; a client that leaves a shared batch gets nothing more.

    Every worker runs the served model itself: its compiled programs are
    found by structure, so requests with any settings share them, and a
    program's sampler and processors bind one thread's numbers at a time.

    Args:
        lm: the served `keras_gen.models.CausalLM` (with a tokenizer).
        max_batch_size: int, rows per generate call.
        batch_wait_seconds: float, how long a new batch waits for more
            requests before it starts.
        num_workers: int, batches that may run at the same time.
        stream_chunk_size: int, decoding steps between two deliveries.

    Examples:
    >>> scheduler = BatchScheduler(lm, max_batch_size=8)  # doctest: +SKIP
    >>> scheduler.submit(job)  # doctest: +SKIP
    """

    def __init__(
        self,
        lm,
        max_batch_size=8,
        batch_wait_seconds=0.01,
        num_workers=4,
        stream_chunk_size=4,
    ):
        self.lm = lm
        self.max_batch_size = max_batch_size
        self.batch_wait_seconds = batch_wait_seconds
        self.num_workers = num_workers
        self.stream_chunk_size = stream_chunk_size
        self.stats = collections.Counter(
            batches=0, rows=0, running_batches=0, cancelled_batches=0, tokens=0
        )
        self._stats_lock = threading.Lock()
        self._pending = collections.deque()
        # Batches still gathering jobs, by key: new jobs join them directly.
        self._gathering = {}
        self._condition = threading.Condition()
        self._closed = False
        self._workers = []

    def start(self):
        for index in range(self.num_workers):
            worker = threading.Thread(
                target=self._work, name=f"keras-gen-batch-{index}", daemon=True
            )
            worker.start()
            self._workers.append(worker)

    def close(self, timeout=5.0):
        with self._condition:
            self._closed = True
            for job in self._pending:
                job.cancel()
            self._condition.notify_all()
        for worker in self._workers:
            worker.join(timeout)

    def submit(self, job):
        """Queue a job; its events arrive through `job.put`."""
        with self._condition:
            if self._closed:
                raise APIError("The server is shutting down.", status=503)
            batch = self._gathering.get(job.request.batch_key)
            if batch is not None and self._rows(batch + [job]) <= self.max_batch_size:
                batch.append(job)
            else:
                self._pending.append(job)
            self._condition.notify_all()

    def _count(self, name, delta=1):
        with self._stats_lock:
            self.stats[name] += delta

    @staticmethod
    def _rows(jobs):
        return sum(len(job.request.rows) for job in jobs)

    def _next_batch(self):
        """Jobs for one generate call, or `None` once closed."""
        with self._condition:
            while True:
                while self._pending and self._pending[0].cancelled:
                    self._pending.popleft()
                if self._closed:
                    return None
                if self._pending:
                    break
                self._condition.wait()
            first = self._pending.popleft()
            key = first.request.batch_key
            batch = [first]
            deadline = time.monotonic() + self.batch_wait_seconds
            self._gathering[key] = batch
            try:
                while self._rows(batch) < self.max_batch_size:
                    for job in [j for j in self._pending if j.request.batch_key == key]:
                        if self._rows(batch + [job]) <= self.max_batch_size:
                            self._pending.remove(job)
                            batch.append(job)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._closed:
                        break
                    self._condition.wait(remaining)
            finally:
                # Another worker may have opened a batch for the same key
                # since (this one was full): leave that one open.
                if self._gathering.get(key) is batch:
                    del self._gathering[key]
            return [job for job in batch if not job.cancelled]

    def _work(self):
        while True:
            jobs = self._next_batch()
            if jobs is None:
                return
            if not jobs:
                continue
            self._count("batches")
            self._count("rows", self._rows(jobs))
            self._count("running_batches")
            try:
                self._run(jobs)
            except APIError as error:
                for job in jobs:
                    job.put({"type": "error", "error": error})
            except Exception as error:  # the server must stay up
                for job in jobs:
                    job.put(
                        {
                            "type": "error",
                            "error": APIError(
                                f"Generation failed: {type(error).__name__}: {error}",
                                status=500,
                                type="server_error",
                            ),
                        }
                    )
            finally:
                self._count("running_batches", -1)

    def _run(self, jobs):
        request = jobs[0].request
        rows = [row for job in jobs for row in job.request.rows]
        # The request's sampler and processors carry every filter and
        # penalty, so that every request shares one compiled program.
        chunks = self.lm.stream(
            rows,
            request.config.without("sampling", "processors"),
            sampler=request.sampler,
            processors=request.processors,
            stream_chunk_size=self.stream_chunk_size,
        )
        # Which rows of the batch belong to which job.
        spans, start = [], 0
        for job in jobs:
            spans.append((job, start, start + len(job.request.rows)))
            start = spans[-1][2]
        try:
            for chunk in chunks:
                live = [span for span in spans if not span[0].cancelled]
                if not live:
                    self._count("cancelled_batches")
                    break
                for job, low, high in live:
                    if not job.done:
                        self._deliver(job, chunk, low, high)
                if all(job.done for job, _, _ in live):
                    break
        finally:
            # Leaving the stream ends generation and frees the cache.
            chunks.close()

    def _deliver(self, job, chunk, low, high):
        """Send rows `[low, high)` of a stream chunk to `job`."""
        pieces = []
        for r in range(low, high):
            token_ids = chunk.token_ids[r]
            self._count("tokens", len(token_ids))
            reason = chunk.finish_reasons[r]
            top = None
            if job.request.logprobs and chunk.scores is not None:
                top = _top_logprobs(chunk.scores[r], job.request.logprobs)
            pieces.append(
                {
                    "text": chunk.text[r],
                    "token_ids": token_ids,
                    "log_probs": (
                        None
                        if chunk.log_probs is None
                        else [float(x) for x in chunk.log_probs[r]]
                    ),
                    "top_logprobs": top,
                    # A row cut by `max_time` reads as a length limit.
                    "finish_reason": (
                        None
                        if reason is None
                        else ("stop" if reason == "stop" else "length")
                    ),
                }
            )
        job.put({"type": "chunk", "rows": pieces})
        if all(chunk.finish_reasons[r] is not None for r in range(low, high)):
            job.put({"type": "done"})
