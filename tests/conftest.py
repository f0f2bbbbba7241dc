"""Shared fixtures: tiny models with weights that are the same on every backend."""

import os

# Compiling a torch step with inductor takes tens of seconds on a small CPU;
# the suite compiles with aot_eager (same graph capture, no code generation)
# and one slow test checks inductor itself.
os.environ.setdefault("KERAS_GEN_TORCH_COMPILER", "aot_eager")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from keras_gen import backend  # noqa: E402

if keras.config.backend() == "torch":
    import torch

    # Every compiled loop step is the same code object (the body in
    # `Sampler.run`), and dynamo keeps at most `recompile_limit` (default 8)
    # programs per code object; the suite builds more than 8 (models,
    # samplers, batch sizes).
    torch._dynamo.config.recompile_limit = 64
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
def traces():
    """Counts the generation programs traced since the fixture was made."""
    start = backend.trace_count()
    return lambda: backend.trace_count() - start


def pytest_report_header(config):
    return f"keras backend: {keras.config.backend()}"


def pytest_collection_modifyitems(config, items):
    # `only_backend("jax")` marks a test that is meaningful on one backend.
    for item in items:
        marker = item.get_closest_marker("only_backend")
        if marker and keras.config.backend() not in marker.args:
            item.add_marker(
                pytest.mark.skip(reason=f"runs on {marker.args} only")
            )
