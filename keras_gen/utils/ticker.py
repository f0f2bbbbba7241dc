"""A progress line for long waits (compiles) on stderr."""

import sys
import threading
import time


class Ticker:
    """Counts the seconds of a wait on one line of `stream` (stderr).

    Used as a context manager around a wait that may be long: after `delay`
    seconds it shows `describe()` (called again at each tick, so the text
    may change, e.g. from "waiting" to "compiling") with the seconds so far.
    On a terminal the line is rewritten in place every second and erased
    when the wait ends; elsewhere (a log file, a pipe) a line is written
    every `log_interval` seconds, and the wait's length when it ends unless
    `closing_line=False` (the caller logs it).
    """

    def __init__(
        self, describe, stream=None, delay=1.0, log_interval=10.0, closing_line=True
    ):
        self.describe = describe if callable(describe) else lambda: describe
        self.stream = sys.stderr if stream is None else stream
        self.delay = delay
        self.log_interval = log_interval
        self.closing_line = closing_line
        self._done = threading.Event()
        self._shown = False

    def __enter__(self):
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def stop(self):
        """End the wait (again: nothing); erase or close the line."""
        if self._done.is_set():
            return
        self._done.set()
        self._thread.join()
        if not self._shown:
            return
        if self._terminal():
            self._write("\r\033[K")
        elif self.closing_line:
            seconds = time.perf_counter() - self._started
            self._write(f"keras-gen: {self.describe()}: done in {seconds:.1f} s\n")

    def _terminal(self):
        try:
            return self.stream.isatty()
        except (AttributeError, OSError, ValueError):  # not a file, or closed
            return False

    def _write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream: nothing to show
            pass

    def _tick(self):
        terminal = self._terminal()
        wait = self.delay
        while not self._done.wait(wait):
            self._shown = True
            seconds = time.perf_counter() - self._started
            if terminal:
                self._write(f"\r\033[Kkeras-gen: {self.describe()}... {seconds:.0f} s")
                wait = 1.0
            else:
                self._write(f"keras-gen: {self.describe()}... {seconds:.0f} s\n")
                wait = self.log_interval
