import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]
SCRIPT = str(ROOT / "tools" / "benchmark_startup.py")


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_startup_benchmark_times_processes_on_one_cache(tmp_path):
    output = tmp_path / "results.json"
    command = [sys.executable, SCRIPT, "--tiny", "--backends", "jax"]
    command += ["--prompt-length", "8", "--max-length", "24", "--json", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (first, second) = json.loads(output.read_text())["results"]["jax"]
    for figures in (first, second):
        assert set(figures) == {
            "import_s",
            "load_s",
            "first_call_s",
            "second_call_s",
            "process_s",
        }
        assert 0 < figures["second_call_s"] and figures["process_s"] > figures["load_s"]
    assert "| jax | 2 |" in result.stdout


def test_startup_benchmark_refuses_unknown_backends():
    result = subprocess.run(
        [sys.executable, SCRIPT, "--backends", "mxnet"], capture_output=True, text=True
    )
    assert result.returncode == 2 and "--backends" in result.stderr
