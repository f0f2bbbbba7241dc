import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAG = "--xla_cpu_copy_insertion_use_region_analysis"


def xla_flags_after_import(flags=None, compute_first=False):
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": ROOT}
    env.pop("XLA_FLAGS", None)
    if flags is not None:
        env["XLA_FLAGS"] = flags
    code = (
        "import os, jax\n"
        + ("jax.numpy.ones(2).block_until_ready()\n" if compute_first else "")
        + "import keras_gen.backend\n"
        "print(os.environ.get('XLA_FLAGS', ''))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


@pytest.mark.only_backend("jax")
def test_xla_copies_a_loops_caches_less_unless_told_otherwise():
    assert xla_flags_after_import() == f"{FLAG}=true"
    # The user's other flags are kept; their own setting of it stands.
    assert xla_flags_after_import("--xla_cpu_enable_fast_math=false") == (
        f"--xla_cpu_enable_fast_math=false {FLAG}=true"
    )
    assert xla_flags_after_import(f"{FLAG}=false") == f"{FLAG}=false"
    # XLA has read its flags already: they are left as they are.
    assert xla_flags_after_import(compute_first=True) == ""
