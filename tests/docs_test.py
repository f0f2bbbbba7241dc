"""The documentation's Python blocks run as written.

A page's blocks run in order in one namespace, as a reader would type them
into one session, from a fresh folder. A block right after a
`<!-- not run: REASON -->` comment is skipped (it needs what a test cannot
have: a download, eight accelerators); the reason is in the page's source.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(<!-- not run: (?P<reason>.+?) -->\s*)?```python\n(?P<code>.*?)```", re.S
)


def python_blocks(text):
    """`(line, code, reason)` of each Python block; `reason` is None for
    the blocks that run."""
    for match in BLOCK.finditer(text):
        line = text[: match.start("code")].count("\n") + 1
        yield line, match.group("code"), match.group("reason")


def run_page(text, name):
    """Run `text`'s blocks in order in one namespace; fail naming the block."""
    namespace = {"__name__": "__main__"}
    for line, code, reason in python_blocks(text):
        if reason is not None:
            continue
        try:
            exec(compile(code, f"{name}:{line}", "exec"), namespace)
        except Exception as error:
            pytest.fail(
                f"{name}, the block at line {line}: {type(error).__name__}: {error}"
            )


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_python_block_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_page(page.read_text(encoding="utf-8"), page.name)


@pytest.mark.only_backend("jax")
def test_a_failing_block_fails_the_page():
    page = "```python\nx = 1\n```\n\n<!-- not run: a demo -->\n```python\nimport nothing\n```\n"
    run_page(page, "page.md")
    with pytest.raises(
        pytest.fail.Exception, match=r"page.md, the block at line 10: NameError"
    ):
        run_page(page + "```python\nx = y\n```\n", "page.md")
