import os
import pathlib
import runpy
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).parents[2] / "examples"


@pytest.fixture(autouse=True)
def no_arguments(monkeypatch):
    """An example run in process reads no arguments (not pytest's)."""
    monkeypatch.setattr(sys, "argv", ["example"])


@pytest.mark.parametrize("name", ["quickstart.py"])
def test_example_runs(name, capsys):
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert "[[1, 2, 3" in capsys.readouterr().out


@pytest.mark.only_backend("jax")
def test_generation_options_example_runs(capsys):
    runpy.run_path(str(EXAMPLES / "generation_options.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert out.startswith("GenerationConfig(max_new_tokens=64, do_sample=True")
    assert "A class definition" in out and "Exceptions are" in out


@pytest.mark.only_backend("jax")
def test_distributed_generate_runs_on_8_devices():
    # A subprocess: the example fakes 8 CPU devices before JAX starts.
    root = EXAMPLES.parent
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "PYTHONPATH": os.pathsep.join(
            [str(root)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
        ),
    }
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "distributed_generate.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sharded as PartitionSpec(None, 'model')" in result.stdout or (
        "sharded as P(None, 'model')" in result.stdout
    )
    assert "[[1, 2, 3" in result.stdout


@pytest.mark.only_backend("jax")
def test_structured_output_example_runs(capsys):
    runpy.run_path(str(EXAMPLES / "structured_output.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("{'statement': '") for line in lines[:2])
    assert lines[2].startswith("['yes'") or lines[2].startswith("['no'")


@pytest.mark.only_backend("jax")
def test_finetune_lora_example_runs(tmp_path, capsys):
    from tests.text_models import save_tiny_text_model

    save_tiny_text_model(tmp_path / "model")
    example = runpy.run_path(str(EXAMPLES / "finetune_lora.py"))
    example["main"](
        [
            str(tmp_path / "model"),
            "--steps",
            "8",
            "--texts",
            "40",
            "--out",
            str(tmp_path),
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("training ") and " of " in lines[0]
    assert any("/step - " in line for line in lines)  # Keras' progress
    (loss,) = [line for line in lines if line.startswith("validation loss")]
    before, after = (float(x) for x in loss.split()[2:5:2])
    assert after < before
    assert sorted(os.listdir(tmp_path / "adapter")) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.only_backend("jax")
@pytest.mark.slow
def test_multihost_generate_on_two_processes_equals_one_device():
    import json

    import keras_gen

    root = EXAMPLES.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(root)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
        ),
    }
    env.pop("XLA_FLAGS", None)
    coordinator = f"127.0.0.1:{_free_port()}"
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLES / "multihost_generate.py"),
                "--coordinator",
                coordinator,
                "--process-id",
                str(i),
                "--cpu-devices",
                "4",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=300) for p in processes]
    finally:
        for p in processes:
            p.kill()
    for p, (_, err) in zip(processes, outputs):
        assert p.returncode == 0, err[-3000:]
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert [r["process"] for r in reports] == [0, 1]
    assert all(r["devices"] == 8 and r["mesh"] == [2, 4] for r in reports)
    example = runpy.run_path(str(EXAMPLES / "multihost_generate.py"))
    lm = keras_gen.CausalLM.from_preset("demo")
    expected = lm.generate(
        example["PROMPTS"], max_new_tokens=16, do_sample=False, return_dict=True
    )
    # Every process holds the whole result, and it is the one-device result.
    assert reports[0]["tokens"] == reports[1]["tokens"] == expected.token_ids
