import io

import pytest

import keras_gen
from keras_gen.utils import progress


@pytest.mark.only_backend("jax")
def test_no_bar_off_a_terminal(capsys):
    assert list(progress.track(range(3), "loading")) == [0, 1, 2]
    assert capsys.readouterr().err == ""


@pytest.mark.only_backend("jax")
def test_a_bar_on_a_terminal(monkeypatch):
    terminal = io.StringIO()
    terminal.isatty = lambda: True
    monkeypatch.setattr("sys.stderr", terminal)
    assert list(progress.track(range(3), "Loading demo")) == [0, 1, 2]
    assert "Loading demo" in terminal.getvalue()
    assert "0/3" in terminal.getvalue()  # then erased: leave=False


def test_loading_a_checkpoint_reports_every_weight():
    reports = []
    with progress.reporting(
        lambda done, total, what: reports.append((done, total, what))
    ):
        lm = keras_gen.CausalLM.from_preset("demo")
    total = len(lm.backbone.weights)
    assert reports[0] == (0, reports[0][1], "Loading demo")
    # The tied head is one weight; every weight of the map is reported.
    assert reports[-1][:2] == (reports[-1][1], reports[-1][1])
    assert [done for done, _, _ in reports] == list(range(reports[-1][1] + 1))
    assert 0 < reports[-1][1] <= total
