"""Importing keras_gen picks an installed backend when nothing else does."""

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHOW = "import keras_gen.models, keras; print(keras.config.backend())"


def python(code, tmp_path, **env):
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("KERAS_BACKEND", "KERAS_HOME")
    }
    environment.update(PYTHONPATH=ROOT, KERAS_HOME=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


def first_installed():
    return next(
        b for b in ("jax", "torch", "tensorflow") if importlib.util.find_spec(b)
    )


# Backend-independent (each case runs its own process): one backend.
pytestmark = pytest.mark.only_backend("jax")


def test_nothing_chosen_picks_the_first_installed_and_says_so(tmp_path):
    result = python(SHOW, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [first_installed()]
    assert "neither KERAS_BACKEND nor keras.json chooses one" in result.stderr
    assert result.stderr.count("keras-gen runs on") == 1


@pytest.mark.skipif(
    importlib.util.find_spec("openvino") is not None, reason="openvino is installed"
)
def test_a_chosen_backend_that_is_not_installed_is_replaced(tmp_path):
    result = python(SHOW, tmp_path, KERAS_BACKEND="openvino")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [first_installed()]
    assert "'openvino' is not installed" in result.stderr


@pytest.mark.parametrize("through", ["environment", "keras.json"])
def test_an_installed_choice_stands_silently(tmp_path, through):
    if not importlib.util.find_spec("torch"):
        pytest.skip("torch is not installed")
    env = {}
    if through == "environment":
        env["KERAS_BACKEND"] = "torch"
    else:
        (tmp_path / "keras.json").write_text('{"backend": "torch"}')
    result = python(SHOW, tmp_path, **env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["torch"]
    assert "keras-gen runs on" not in result.stderr


def test_the_keras_json_keras_writes_itself_is_not_a_choice(tmp_path):
    # Keras writes this file (naming TensorFlow) at its first import,
    # whatever backend it loads: later runs must pick as the first did.
    first = python(SHOW, tmp_path)
    assert '"backend": "tensorflow"' in (tmp_path / "keras.json").read_text()
    second = python(SHOW, tmp_path)
    assert first.stdout.split() == second.stdout.split() == [first_installed()]
