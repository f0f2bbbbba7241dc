import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_benchmark_runs_a_tiny_workload_side_by_side(tmp_path):
    output = tmp_path / "results.json"
    command = [
        sys.executable,
        str(ROOT / "tools" / "benchmark.py"),
        "--tiny",
        "--repeats",
        "2",
        "--max-length",
        "48",
        "--ttft-max-length",
        "96",
        "--stream",
        "--quantize",
        "int8",
        "--batch",
        "2,1",
        "--systems",
        "keras-gen,keras-hub,transformers,ctranslate2,llama.cpp",
        "--json",
        str(output),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads(output.read_text())["results"]
    for name in ("keras-gen", "keras-hub", "transformers"):
        assert "error" not in results[name], results[name]
        assert set(results[name]["batches"]) == {"1", "2"}
        assert results[name]["batches"]["1"]["tokens_per_s"] > 0
    # Each batch size has its own figures and tokens, from one process.
    ours = results["keras-gen"]["batches"]["2"]
    assert len(ours["tokens"]) == 2
    assert len(results["keras-gen"]["batches"]["1"]["tokens"]) == 1
    assert results["keras-gen"]["batches"]["1"]["tokens"][0] == ours["tokens"][0]
    assert ours["tokens"] == results["transformers"]["batches"]["2"]["tokens"]
    assert ours["tokens"] == results["keras-hub"]["batches"]["2"]["tokens"]
    # Timed in alternating rounds, one run of each system per round.
    assert all(
        len(batch["rounds"]) == 2
        for result in results.values()
        for batch in result.get("batches", {}).values()
    )
    if "skipped" in results["ctranslate2"]:
        assert results["ctranslate2"]["skipped"] == "ctranslate2 not installed"
        assert "skipped: ctranslate2 not installed" in result.stdout
    else:
        assert results["ctranslate2"]["batches"]["2"]["tokens"] == ours["tokens"]
    if "skipped" in results["llama.cpp"]:
        assert results["llama.cpp"]["skipped"].endswith("not installed")
        assert "skipped: " in result.stdout
    else:
        assert results["llama.cpp"]["batches"]["2"]["tokens"] == ours["tokens"]
    assert ours["prompt_tokens_per_s"] > 0
    assert "stream_overhead" in ours and "time_to_first_token_long_ms" in ours
    assert "keras-gen / keras-hub" in result.stdout
    assert "keras-gen / ctranslate2, time per step: batch 2 x" in result.stdout or (
        "skipped" in results["ctranslate2"]
    )
    int8 = results["keras-gen-int8"]["batches"]["2"]
    assert len(int8["log_probs"]) == len(ours["tokens"])
    assert "keras-gen-int8 drift from float32" in result.stdout


@pytest.mark.only_backend("jax")
def test_benchmark_fails_when_a_system_fails():
    # --tiny has 128 positions: 256 fails in keras-gen, and the run says so.
    command = [sys.executable, str(ROOT / "tools" / "benchmark.py"), "--tiny"]
    command += ["--systems", "keras-gen", "--repeats", "1", "--max-length", "256"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "FAILED: keras-gen" in result.stdout
    assert "beyond the model's 128 positions" in result.stdout
