"""Fit a tiny model on one device, then under `keras.distribution.DataParallel`
on 8 fake CPU devices, and report both as JSON.

Run by `causal_lm_fit_test.py` in a subprocess (the device count must be set
before JAX starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 KERAS_BACKEND=jax \
        python tests/models/data_parallel_fit.py OUT.json
"""

import json
import os
import sys

import keras
import numpy as np

sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)

from tests.text_models import TEXT  # noqa: E402
from tests.text_models import tiny_text_lm  # noqa: E402


def fit():
    """Losses per epoch, and the weights after, of a seeded LoRA fit."""
    keras.utils.set_random_seed(0)
    lm = tiny_text_lm()
    lm.backbone.enable_lora(2, target_modules="all-linear")
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    # 16 rows of uneven lengths: 2 per device, padding in every batch.
    history = lm.fit(TEXT * 4, epochs=3, batch_size=16, shuffle=False, verbose=0)
    weights = [keras.ops.convert_to_numpy(v) for v in lm.trainable_weights]
    return history.history["loss"], weights, lm


def main(out):
    losses, weights, _ = fit()
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices)
    )
    parallel_losses, parallel_weights, lm = fit()
    sharding = lm.trainable_weights[0].value.sharding
    report = {
        "devices": len(devices),
        "losses": losses,
        "parallel_losses": parallel_losses,
        "weight_difference": max(
            float(np.abs(a - b).max()) for a, b in zip(weights, parallel_weights)
        ),
        "replicated": bool(sharding.is_fully_replicated),
    }
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1])
