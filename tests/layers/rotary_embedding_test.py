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


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}


@pytest.mark.parametrize(
    "scaling",
    [
        YARN,
        {**YARN, "beta_fast": 16, "beta_slow": 2, "truncate": False},
        {**YARN, "mscale": 1.0, "mscale_all_dim": 0.5},
        {**YARN, "attention_factor": 1.25},
        {**YARN, "mscale": 0, "mscale_all_dim": 0},
    ],
    ids=["yarn", "betas_untruncated", "mscale", "attention_factor", "mscale_zero"],
)
def test_yarn_matches_transformers(scaling):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=64,
        num_attention_heads=2,
        max_position_embeddings=64,
        rope_parameters={"rope_theta": 1e4, **scaling},
    )
    expected, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    rope = RotaryEmbedding(32, max_wavelength=1e4, scaling=scaling)
    np.testing.assert_allclose(rope.inverse_frequencies, expected.numpy(), rtol=1e-6)
    assert rope.attention_factor == pytest.approx(attention_factor, rel=1e-7)


def test_dynamic_ntk_matches_transformers_past_the_trained_length():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=64,
        num_attention_heads=2,
        max_position_embeddings=16,
        rope_parameters={"rope_type": "dynamic", "factor": 3.0, "rope_theta": 1e4},
    )
    scaling = {
        "rope_type": "dynamic",
        "factor": 3.0,
        "original_max_position_embeddings": 16,
    }
    rope = RotaryEmbedding(32, max_wavelength=1e4, scaling=scaling)
    for reach in (5, 16, 17, 40, 1000):
        expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](
            config, "cpu", seq_len=torch.tensor(reach)
        )
        frequencies = rope._dynamic_frequencies(ops.convert_to_tensor([reach]))
        np.testing.assert_allclose(
            ops.convert_to_numpy(frequencies)[0], expected.numpy(), rtol=2e-6
        )
    # Up to the trained length, plain RoPE; past it, each row by its own
    # reach: a row's rotation never depends on its neighbours'.
    plain = RotaryEmbedding(32, max_wavelength=1e4)
    x = np.random.default_rng(0).standard_normal((2, 1, 30, 32)).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(rope(x[:, :, :16])),
        ops.convert_to_numpy(plain(x[:, :, :16])),
        atol=1e-6,
    )
    rows = ops.convert_to_numpy(rope(x[:, :, :1], index=ops.convert_to_tensor([3, 29])))
    np.testing.assert_allclose(
        rows[0], ops.convert_to_numpy(plain(x[:1, :, :1], index=3))[0], atol=1e-6
    )
    np.testing.assert_allclose(
        rows[1],
        ops.convert_to_numpy(rope(x[1:, :, :1], index=ops.convert_to_tensor(29)))[0],
        atol=1e-6,
    )


def test_a_partial_rotation_rotates_the_leading_dimensions_only():
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 8)).astype("float32")
    partial = RotaryEmbedding(8, partial_rotary_factor=0.5, scaling=YARN)
    whole = RotaryEmbedding(4, scaling=YARN)
    out = ops.convert_to_numpy(partial(x, index=ops.convert_to_tensor(3)))
    np.testing.assert_array_equal(out[..., 4:], x[..., 4:])
    np.testing.assert_allclose(
        out[..., :4],
        ops.convert_to_numpy(whole(x[..., :4], index=ops.convert_to_tensor(3))),
        atol=1e-6,
    )
    clone = RotaryEmbedding.from_config(partial.get_config())
    assert clone.rotary_dim == 4


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
    with pytest.raises(ValueError, match="'dynamic', 'linear', 'llama3'"):
        RotaryEmbedding(8, scaling={"rope_type": "ntk", "factor": 2.0})
    with pytest.raises(ValueError, match="low_freq_factor"):
        RotaryEmbedding(8, scaling={"rope_type": "llama3", "factor": 2.0})
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        RotaryEmbedding(8, scaling={"rope_type": "yarn", "factor": 2.0})
    for value in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match="beta_fast"):
            RotaryEmbedding(8, scaling={**YARN, "beta_fast": value})
    with pytest.raises(TypeError, match="truncate"):
        RotaryEmbedding(8, scaling={**YARN, "truncate": "no"})
    RotaryEmbedding(8, partial_rotary_factor=0.75)  # 6 dimensions rotate
    # Nothing, more than all, none left, an odd count (3 of 6).
    for head_dim, factor in ((8, 0.0), (8, 1.5), (8, 0.1), (6, 0.5)):
        with pytest.raises(ValueError, match="partial_rotary_factor"):
            RotaryEmbedding(head_dim, partial_rotary_factor=factor)
    with pytest.raises(ValueError, match="at least 4"):
        RotaryEmbedding(
            4,
            partial_rotary_factor=0.5,
            scaling={**YARN, "rope_type": "dynamic"},
        )


def test_config_round_trip():
    rope = RotaryEmbedding(8, max_wavelength=1e6, scaling=LLAMA3)
    clone = RotaryEmbedding.from_config(rope.get_config())
    np.testing.assert_array_equal(clone.inverse_frequencies, rope.inverse_frequencies)
