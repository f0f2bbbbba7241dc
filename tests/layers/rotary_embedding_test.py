import numpy as np
import pytest
from keras import ops

from keras_gen.layers import RotaryEmbedding

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}


@pytest.mark.parametrize(
    "scaling",
    [None, {"rope_type": "linear", "factor": 4.0}, LLAMA3],
    ids=["default", "linear", "llama3"],
)
def test_frequencies_match_transformers(scaling):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    parameters = {"rope_theta": 500000.0, **(scaling or {"rope_type": "default"})}
    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=2, rope_parameters=parameters
    )
    rope_type = parameters["rope_type"]
    if rope_type == "default":
        config.standardize_rope_params()
        expected = 1.0 / 500000.0 ** (np.arange(0, 32, 2) / 32)
    else:
        expected = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")[0].numpy()
    rope = RotaryEmbedding(32, max_wavelength=500000.0, scaling=scaling)
    np.testing.assert_allclose(rope.inverse_frequencies, expected, rtol=1e-6)


def test_rotation_at_an_index_equals_the_same_positions_of_a_full_run():
    rope = RotaryEmbedding(8, scaling=LLAMA3)
    x = np.random.default_rng(0).standard_normal((2, 3, 10, 8)).astype("float32")
    full = ops.convert_to_numpy(rope(x))
    part = ops.convert_to_numpy(rope(x[:, :, 6:], index=ops.convert_to_tensor(6)))
    np.testing.assert_allclose(part, full[:, :, 6:], atol=1e-5)
    # A rotation keeps each vector's length; position 0 is not rotated.
    np.testing.assert_allclose(
        np.linalg.norm(full, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5
    )
    np.testing.assert_allclose(full[:, :, 0], x[:, :, 0], atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="`head_dim` must be even"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match="'linear', 'llama3'"):
        RotaryEmbedding(8, scaling={"rope_type": "yarn", "factor": 2.0})
    with pytest.raises(ValueError, match="low_freq_factor"):
        RotaryEmbedding(8, scaling={"rope_type": "llama3", "factor": 2.0})


def test_config_round_trip():
    rope = RotaryEmbedding(8, max_wavelength=1e6, scaling=LLAMA3)
    clone = RotaryEmbedding.from_config(rope.get_config())
    np.testing.assert_array_equal(clone.inverse_frequencies, rope.inverse_frequencies)
