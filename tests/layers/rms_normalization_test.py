import keras
import numpy as np
from keras import ops

from keras_gen.layers import RMSNormalization


def test_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8)).astype("float32")
    norm = RMSNormalization(epsilon=1e-5)
    norm.build(x.shape)
    scale = rng.standard_normal(8).astype("float32")
    norm.scale.assign(scale)
    expected = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5) * scale
    np.testing.assert_allclose(ops.convert_to_numpy(norm(x)), expected, atol=1e-5)


def test_keeps_the_compute_dtype():
    norm = RMSNormalization(dtype="bfloat16")
    outputs = norm(ops.ones((1, 4), dtype="bfloat16"))
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"


def test_config_round_trip():
    norm = RMSNormalization(epsilon=1e-3)
    assert RMSNormalization.from_config(norm.get_config()).epsilon == 1e-3
