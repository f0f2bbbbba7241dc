"""The `>>>` examples in keras_gen's docstrings run and print what they say.

Examples marked `# doctest: +SKIP` need what a test cannot have (a
download, several devices). The backend modules are left out: each one
imports its own backend.
"""

import doctest
import importlib
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).parents[1] / "keras_gen"
MODULES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for path in PACKAGE.rglob("*.py")
    if "backend" not in path.relative_to(PACKAGE).parts[:1]
    and ">>>" in path.read_text(encoding="utf-8")
)


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    failures, tried = doctest.testmod(module, optionflags=flags, verbose=False)
    assert failures == 0, f"{failures} of {tried} examples failed in {name} (see above)"
