"""Hostile command lines: exit status 2 and one line naming what is wrong,
never a traceback."""

import io
import sys

import pytest

from keras_gen import cli
from tests.text_models import save_tiny_text_model

# File and argument checks do not depend on the backend.
pytestmark = pytest.mark.only_backend("jax")


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_model")
    save_tiny_text_model(path)
    return str(path)


def _run(capsys, argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    try:
        status = cli.main(argv)
    except SystemExit as exit_info:  # argparse's own errors
        status = exit_info.code
    out, err = capsys.readouterr()
    return status, err


@pytest.mark.parametrize(
    "argv, stdin, match",
    [
        (["generate", "-"], b"\xff\xfe hi", "not UTF-8"),
        (["generate", "-"], b"", "the prompt is empty"),
        (["generate", "hi", "--top-k", str(10**12)], None, "top_k"),
        (["generate", "hi", "--num-beams", "100000"], None, "num_beams"),
        (["generate", "hi", "--stop", "x" * 10000], None, "--stop may hold at most 8"),
        (["generate", "hi", "--temperature", "nan"], None, "temperature"),
        (
            ["generate", "hi", "--no-repeat-ngram-size", "1000"],
            None,
            "no_repeat_ngram_size",
        ),
        (
            ["generate", "hi", "--max-new-tokens", "1000000"],
            None,
            "context of 256 tokens",
        ),
        (["generate", "hi", "--regex", "a{100000}"], None, "too large"),
        (["serve", "--max-length", "1000000"], None, "max_length"),
        (["serve", "--max-batch-size", "0"], None, "--max-batch-size"),
    ],
)
def test_a_bad_command_line_exits_2_with_one_line(
    capsys, monkeypatch, model_folder, argv, stdin, match
):
    argv = [argv[0], "--model", model_folder, *argv[1:]]
    status, err = _run(capsys, argv, stdin, monkeypatch)
    lines = [line for line in err.splitlines() if "error" in line]
    assert status == 2, err
    assert len(lines) == 1 and match in lines[0], err
    assert "Traceback" not in err
