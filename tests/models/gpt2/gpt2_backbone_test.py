import keras
import numpy as np
import pytest
from keras import ops

from keras_gen.models import GPT2Backbone
from tests.conftest import TINY_GPT2
from tests.models.gpt2 import numpy_gpt2


def test_full_sequence_logits_match_numpy_reference(gpt2_backbone):
    tokens = [5, 9, 2, 33, 61, 0, 7]
    hidden = gpt2_backbone(ops.convert_to_tensor([tokens], "int32"))
    logits = ops.convert_to_numpy(gpt2_backbone.compute_logits(hidden))[0]
    np.testing.assert_allclose(
        logits, numpy_gpt2.logits(gpt2_backbone, tokens), atol=1e-4
    )


def test_cached_logits_match_full_run(gpt2_backbone):
    tokens = np.array([[5, 9, 2, 33, 61, 0, 7, 8]], "int32")
    full = ops.convert_to_numpy(gpt2_backbone.compute_logits(gpt2_backbone(tokens)))[0]
    _, state = gpt2_backbone.build_state(tokens[:, :3], cache_length=16)
    for index in range(3, tokens.shape[1]):
        logits, _, state = gpt2_backbone.call_with_state(
            tokens[:, index : index + 1], state, ops.convert_to_tensor(index)
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(logits)[0, 0], full[index], atol=1e-4
        )


def test_cache_has_fixed_shape(gpt2_backbone):
    _, state = gpt2_backbone.build_state(np.ones((3, 5), "int32"), cache_length=32)
    assert len(state) == TINY_GPT2["num_layers"]
    for key_cache, value_cache in state:
        assert tuple(key_cache.shape) == (3, 2, 32, 8)
        assert tuple(value_cache.shape) == (3, 2, 32, 8)


def test_config_round_trip(gpt2_backbone):
    config = gpt2_backbone.get_config()
    clone = GPT2Backbone.from_config(config)
    assert clone.get_config() == config
    assert clone.count_params() == gpt2_backbone.count_params()


def test_layer_names_follow_the_hugging_face_checkpoint(gpt2_backbone):
    paths = {v.path.split("/", 1)[1] for v in gpt2_backbone.weights}
    assert {"wte/embeddings", "wpe/embeddings", "ln_f/gamma"} <= paths
    assert "h_1/c_attn/kernel" in paths and "h_1/mlp_c_proj/bias" in paths


def test_bfloat16_dtype():
    backbone = GPT2Backbone(**TINY_GPT2, dtype="bfloat16")
    hidden = backbone(np.ones((1, 4), "int32"))
    assert keras.backend.standardize_dtype(hidden.dtype) == "bfloat16"
    assert ops.convert_to_numpy(backbone.compute_logits(hidden)).dtype == np.float32


def test_hidden_dim_must_divide_by_heads():
    with pytest.raises(ValueError, match="num_heads"):
        GPT2Backbone(**{**TINY_GPT2, "num_heads": 3})
