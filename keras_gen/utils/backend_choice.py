"""Choosing a Keras backend that is installed, before Keras loads.

Keras falls back to TensorFlow when nothing chooses a backend, so a user who
installed keras-gen with only JAX (or only torch) would get
`ModuleNotFoundError: No module named 'tensorflow'` at the first import.
`choose_backend` runs when `keras_gen` is imported: if neither
`KERAS_BACKEND` nor Keras' own `keras.json` chooses an installed backend,
it sets `KERAS_BACKEND` to the first installed of jax, torch, tensorflow.
`announce` says so, once, when Keras has loaded on that choice.

Keras writes a `keras.json` naming TensorFlow the first time it loads,
whatever backend it loads with; that untouched file is not a choice (or the
first run would pick JAX and every later one TensorFlow).
"""

import importlib.util
import json
import os
import sys
import warnings

# In order of preference; each is also the name of the package it needs.
BACKENDS = ("jax", "torch", "tensorflow")

# What `choose_backend` did: the backend it set and why, or nothing.
_choice = {}
# The `keras.json` Keras writes when it finds none.
KERAS_DEFAULT_CONFIG = {
    "floatx": "float32",
    "epsilon": 1e-07,
    "backend": "tensorflow",
    "image_data_format": "channels_last",
}


def _keras_json_backend():
    """The backend Keras' config file names, or `None` (no file, or the
    file as Keras first wrote it)."""
    home = os.environ.get("KERAS_HOME") or os.path.join(
        os.path.expanduser("~"), ".keras"
    )
    try:
        with open(os.path.join(home, "keras.json")) as file:
            config = json.load(file)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config == KERAS_DEFAULT_CONFIG:
        return None
    backend = config.get("backend")
    return backend if isinstance(backend, str) else None


def installed(backend):
    """Whether the package `backend` runs on (of its name) can be imported."""
    try:
        return importlib.util.find_spec(backend) is not None
    except (ImportError, ValueError):
        return False


def choose_backend():
    """Set `KERAS_BACKEND` to an installed backend when nothing else will.

    Does nothing once Keras is loaded, or when `KERAS_BACKEND` (else
    `keras.json`) names a backend that is installed.
    """
    if "keras" in sys.modules:
        return
    chosen = os.environ.get("KERAS_BACKEND") or _keras_json_backend()
    if chosen and installed(chosen):
        return
    for backend in BACKENDS:
        if installed(backend):
            os.environ["KERAS_BACKEND"] = backend
            reason = (
                f"the chosen backend {chosen!r} is not installed"
                if chosen
                else "neither KERAS_BACKEND nor keras.json chooses one"
            )
            _choice.update(backend=backend, reason=reason)
            return


def forget_choice():
    """The caller chose the backend itself (the CLI's `--backend`)."""
    _choice.clear()


def announce(active):
    """Say once that keras-gen chose `active`, if it did."""
    if _choice.get("backend") == active:
        # Explicit, so that no source line of the package is shown with it.
        warnings.warn_explicit(
            f"keras-gen runs on the {active} backend: {_choice['reason']}. "
            "Set KERAS_BACKEND to choose another.",
            UserWarning,
            filename="keras-gen",
            lineno=0,
            module="keras_gen",
        )
        _choice.clear()
