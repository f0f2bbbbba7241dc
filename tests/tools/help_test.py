"""Every tool and example answers `--help` (without doing its work)."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]
SCRIPTS = sorted(
    str(path.relative_to(ROOT))
    for folder in ("tools", "examples")
    for path in (ROOT / folder).glob("*.py")
)


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_takes_help(script):
    result = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: ")
