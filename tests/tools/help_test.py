import os
import pathlib
import subprocess
import sys

import pytest

TOOLS = pathlib.Path(__file__).parents[2] / "tools"


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("name", sorted(p.name for p in TOOLS.glob("*.py")))
def test_every_tool_takes_help(name):
    result = subprocess.run(
        [sys.executable, str(TOOLS / name), "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: ")
