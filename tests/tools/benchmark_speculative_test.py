import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]


@pytest.mark.only_backend("jax")
def test_speculative_benchmark_runs_a_tiny_workload(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "benchmark_speculative.py"),
            "--tiny",
            "--json",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    modes = json.loads((tmp_path / "out.json").read_text())["modes"]
    assert set(modes) == {
        "plain",
        "plain (repeating prompt)",
        "self",
        "truncated",
        "lookup",
    }
    assert modes["self"]["acceptance"] == 1.0
    for mode in ("self", "truncated", "lookup"):
        assert modes[mode]["same_tokens_as_plain"], mode


@pytest.mark.only_backend("jax")
def test_speculative_benchmark_names_a_bad_mode():
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "benchmark_speculative.py"),
            "--modes",
            "x",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "--modes: ['x'] are not among" in result.stderr
