import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_structured_benchmark_runs_a_tiny_workload(tmp_path):
    output = tmp_path / "results.json"
    command = [
        sys.executable,
        str(ROOT / "tools" / "benchmark_structured.py"),
        "--tiny",
        "--repeats",
        "1",
        "--new-tokens",
        "24",
        "--json",
        str(output),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads(output.read_text())
    times = results["ms_per_step"]
    # A tiny model's step is within the timer's noise: only the shape of
    # the results is checked here.
    assert all(math.isfinite(times[name]) for name in times)
    assert {"keras-gen", "keras-gen + JsonSchema"} <= set(times)
    assert results["states"] > 1 and results["automaton_cached_s"] < 0.01
    # outlines is not a test dependency: its peer runs where it is installed.
    assert "outlines + transformers" in times or "outlines_skipped" in results
    assert "keras-gen + JsonSchema:" in result.stdout
