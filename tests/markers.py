"""Shared test marks."""

import pytest

# Checks of backend-neutral logic (requests compared with `generate`, the
# engine's scheduling) that compile programs per case: torch runs them
# eagerly in seconds where jax and TensorFlow compiled for 15 s to 2
# minutes each (measured with --durations per backend), so they run there.
ON_TORCH_ONLY = pytest.mark.only_backend("torch")
