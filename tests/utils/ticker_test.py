import io
import time

import pytest

from keras_gen.utils.ticker import Ticker

# The same on every backend: it touches none.
pytestmark = pytest.mark.only_backend("jax")


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_short_wait_shows_nothing():
    stream = Terminal()
    with Ticker("compiling", stream=stream, delay=5):
        pass
    assert stream.getvalue() == ""


def test_a_terminal_line_counts_in_place_and_is_erased():
    stream = Terminal()
    texts = iter(["waiting", "compiling"])
    with Ticker(lambda: next(texts, "compiling"), stream=stream, delay=0.05):
        time.sleep(1.3)
    shown = stream.getvalue()
    assert shown.startswith("\r\033[Kkeras-gen: waiting... 0 s")
    assert "\r\033[Kkeras-gen: compiling... 1 s" in shown
    assert shown.endswith("\r\033[K") and "\n" not in shown


def test_a_log_gets_lines_and_the_total():
    stream = io.StringIO()
    with Ticker("compiling", stream=stream, delay=0.05, log_interval=0.1):
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and lines[0] == "keras-gen: compiling... 0 s"
    assert lines[-1].startswith("keras-gen: compiling: done in 0.")


def test_stop_is_idempotent_and_a_closed_stream_is_no_error():
    stream = io.StringIO()
    ticker = Ticker("compiling", stream=stream, delay=0.01)
    with ticker:
        time.sleep(0.05)
        stream.close()
    ticker.stop()
