"""Shared fixtures: tiny models with weights that are the same on every backend."""

import os

# Compiling a torch step takes seconds (aot_eager) to tens of seconds
# (inductor) on a small CPU, so on torch the suite runs the loop eagerly;
# tests that are about compilation ask for the `torch_compiled` fixture, and
# a slow test checks inductor itself.
os.environ.setdefault("KERAS_GEN_TORCH_COMPILER", "none")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Compile counts are about this process: no programs from earlier runs.
os.environ.setdefault("KERAS_GEN_COMPILATION_CACHE", "0")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from keras_gen import backend  # noqa: E402
from keras_gen.models import GPT2Backbone  # noqa: E402
from keras_gen.models import GPT2CausalLM  # noqa: E402

TINY_GPT2 = dict(
    vocabulary_size=64,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_sequence_length=128,
)


def set_numpy_weights(model, seed=0, scale=0.5):
    """Give every variable seeded numpy values: identical on all backends.

    `scale` is large enough that a tiny model's logits are far apart, so
    greedy decoding is not decided by float noise.
    """
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        shape = tuple(variable.shape)
        if variable.path.endswith("gamma"):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            value = scale * rng.standard_normal(shape)
        variable.assign(value.astype(variable.dtype))
    return model


def tiny_gpt2_backbone(seed=0, **overrides):
    return set_numpy_weights(GPT2Backbone(**{**TINY_GPT2, **overrides}), seed)


@pytest.fixture
def gpt2_backbone():
    return tiny_gpt2_backbone()


@pytest.fixture
def gpt2_lm(gpt2_backbone):
    return GPT2CausalLM(gpt2_backbone)


@pytest.fixture
def torch_compiled(monkeypatch):
    """On torch, compile the loop step (with aot_eager) in this test."""
    if keras.config.backend() == "torch":
        from keras_gen.backend import torch_backend

        monkeypatch.setattr(torch_backend, "COMPILER", "aot_eager")


@pytest.fixture
def traces(torch_compiled):
    """Counts the generation programs traced since the fixture was made.

    On torch it turns compilation on: the count is of compiled steps.
    """
    start = backend.trace_count()
    return lambda: backend.trace_count() - start


# Backend compiles seen by JAX (XLA), counted from the first test on.
_jax_compiles = [0]
if keras.config.backend() == "jax":
    import jax

    def _count_jax_compile(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            _jax_compiles[0] += 1

    jax.monitoring.register_event_duration_secs_listener(_count_jax_compile)


@pytest.fixture
def compiles(torch_compiled):
    """Counts compiles since the fixture was made: XLA backend compiles on
    JAX (`jax.monitoring`), traced programs elsewhere (compiled torch
    steps, with torch compiling)."""
    if keras.config.backend() == "jax":
        start = _jax_compiles[0]
        return lambda: _jax_compiles[0] - start
    start = backend.trace_count()
    return lambda: backend.trace_count() - start


if keras.config.backend() == "torch":
    import torch

    # Tiny models gain nothing from threads, and spinning threads slow every
    # small matmul when the cores are shared.
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _fresh_torch_compile_cache():
    # Graphs compiled for one test's models are of no use to the next.
    yield
    if keras.config.backend() == "torch":
        import torch

        torch._dynamo.reset()


def pytest_report_header(config):
    return f"keras backend: {keras.config.backend()}"


def pytest_collection_modifyitems(config, items):
    # `only_backend("jax")` marks a test that is meaningful on one backend.
    # Slow checks of backend-neutral logic (samplers, streams, the engine)
    # run on jax and torch only: TensorFlow compiles slowest, and the CI must
    # stay under 45 minutes on 2 cores.
    # A test's marks and its parameter's narrow each other.
    for item in items:
        for marker in item.iter_markers("only_backend"):
            if keras.config.backend() not in marker.args:
                reason = f"runs on {marker.args} only"
                item.add_marker(pytest.mark.skip(reason=reason))
                break
