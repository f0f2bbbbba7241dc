import pathlib
import runpy

import pytest

EXAMPLES = pathlib.Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("name", ["quickstart.py"])
def test_example_runs(name, capsys):
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert "[[1, 2, 3" in capsys.readouterr().out
