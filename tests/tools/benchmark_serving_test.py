import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

ROOT = pathlib.Path(__file__).parents[2]


def run(tmp_path, *arguments):
    output = tmp_path / "results.json"
    command = [
        sys.executable,
        str(ROOT / "tools" / "benchmark_serving.py"),
        "--model",
        "tiny",
        "--prompt-lengths",
        "4:12",
        "--max-batch-size",
        "2",
        "--max-length",
        "64",
        "--json",
        str(output),
        *arguments,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return json.loads(output.read_text())["results"], result.stdout


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_the_serving_benchmark_runs_on_a_tiny_model(tmp_path):
    results, stdout = run(
        tmp_path,
        "--requests",
        "5",
        "--rate",
        "50",
        "--max-tokens",
        "3:9",
        "--mix",
        # Not `lookup`: its speculative programs double the warm-up; the
        # ngram scenario below speculates.
        "greedy,sample,top_k,top_p",
    )
    for name in ("concurrent", "sequential"):
        run_ = results[name]
        assert run_["completed"] == 5 and not run_["errors"]
        assert run_["output_tokens_per_s"] > 0
        assert set(run_["inter_token_latency"]) == {"p50_ms", "p90_ms", "p99_ms"}
    assert results["batching_gain"] > 0
    # The server warmed up at startup: the measured requests compiled nothing.
    before, after = results["server_before"], results["server_after"]
    assert before["compilations"] == after["compilations"] and after["rss_mb"] > 0
    assert "batching gain" in stdout

    results, stdout = run(
        tmp_path, "--scenario", "short-among-long", "--long", "2", "--rounds", "1"
    )
    assert results["busy_over_idle"] > 0 and "long running" in stdout
    assert results["server_busy_over_idle"] > 0

    results, stdout = run(
        tmp_path, "--scenario", "lone", "--rounds", "1", "--max-tokens", "9"
    )
    assert results["engine_over_stream"] > 0 and "lm.stream" in stdout

    # lm.generate's step is a difference of two calls: 9 tokens of the tiny
    # model (0.02 ms a step on jax) were lost in a busy machine's noise.
    results, stdout = run(
        tmp_path,
        *("--scenario", "busy", "--rounds", "1"),
        *("--max-length", "512", "--max-tokens", "470"),
    )
    assert results["engine_over_generate"] > 0 and "lm.generate" in stdout

    results, stdout = run(
        tmp_path, "--scenario", "ngram", "--rounds", "1", "--max-tokens", "9"
    )
    for kind in ("repeating", "random"):
        assert results[kind]["lone_speedup"] > 0
        assert not results[kind]["concurrent_lookup"]["errors"]
    assert "prompt lookup" in stdout

    results, stdout = run(
        tmp_path, "--scenario", "draft", "--rounds", "1", "--max-tokens", "9"
    )
    # The draft changes the speed, never the tokens.
    assert results["same_tokens"] and results["lone_speedup"] > 0
    assert 0 <= results["acceptance"] <= 1 and "layer draft" in stdout


def test_several_prefill_pauses_are_for_the_long_prompt_scenario():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import benchmark_serving
    finally:
        sys.path.remove(str(ROOT / "tools"))
    args = benchmark_serving.parse_args(
        ["--scenario", "long-prompt", "--prefill-pause", "1,4"]
    )
    assert args.pauses == [1.0, 4.0] and args.prefill_pause == 1.0
    for wrong in (["--prefill-pause", "1,4"], ["--prefill-pause", "x"]):
        with pytest.raises(SystemExit):
            benchmark_serving.parse_args(wrong)
