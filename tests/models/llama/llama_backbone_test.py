import keras
import numpy as np
import pytest
from keras import ops

from keras_gen.models import LlamaBackbone
from keras_gen.models import LlamaCausalLM
from tests.conftest import set_numpy_weights

TINY_LLAMA = dict(
    vocabulary_size=64,
    num_layers=2,
    num_query_heads=4,
    num_key_value_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
)


def tiny_llama_backbone(seed=0, **overrides):
    return set_numpy_weights(LlamaBackbone(**{**TINY_LLAMA, **overrides}), seed)


def _full_logits(backbone, tokens):
    return ops.convert_to_numpy(backbone.compute_logits(backbone(tokens)))[0]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_word_embeddings": True, "query_key_value_bias": True},
        {"sliding_window": 3},
        {"sliding_window": 3, "sliding_window_layers": [1]},
    ],
    ids=["plain", "tied_bias", "window", "window_one_layer"],
)
def test_cached_logits_match_full_run(overrides):
    backbone = tiny_llama_backbone(**overrides)
    tokens = np.array([[5, 9, 2, 33, 61, 0, 7, 8, 40, 41]], "int32")
    full = _full_logits(backbone, tokens)
    _, state = backbone.build_state(tokens[:, :3], cache_length=16)
    for index in range(3, tokens.shape[1]):
        logits, _, state = backbone.call_with_state(
            tokens[:, index : index + 1], state, ops.convert_to_tensor(index)
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(logits)[0, 0], full[index], atol=1e-4
        )


def test_sliding_window_limits_what_late_tokens_see():
    windowed = tiny_llama_backbone(sliding_window=3)
    plain = tiny_llama_backbone()
    tokens = np.array([[5, 9, 2, 33, 61, 0, 7]], "int32")
    windowed_logits = _full_logits(windowed, tokens)
    plain_logits = _full_logits(plain, tokens)
    np.testing.assert_allclose(windowed_logits[:3], plain_logits[:3], atol=1e-5)
    assert np.abs(windowed_logits[-1] - plain_logits[-1]).max() > 1e-3
    # Changing a token outside the last token's window leaves it alone.
    changed = tokens.copy()
    changed[0, 0] = 50
    np.testing.assert_allclose(
        _full_logits(windowed, changed)[-1], windowed_logits[-1], atol=1e-5
    )


def test_cache_has_grouped_query_shape():
    backbone = tiny_llama_backbone()
    _, state = backbone.build_state(np.ones((3, 5), "int32"), cache_length=32)
    assert len(state) == 2
    for key_cache, value_cache in state:
        assert tuple(key_cache.shape) == (3, 2, 32, 4)
        assert tuple(value_cache.shape) == (3, 2, 32, 4)


def test_explicit_head_dim():
    backbone = tiny_llama_backbone(head_dim=8)
    assert tuple(backbone.transformer_layers[0].q_proj.kernel.shape) == (16, 32)
    assert tuple(backbone(np.ones((1, 3), "int32")).shape) == (1, 3, 16)


def test_config_round_trip():
    backbone = tiny_llama_backbone(
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        sliding_window=4,
        sliding_window_layers=[1],
    )
    config = backbone.get_config()
    clone = LlamaBackbone.from_config(config)
    assert clone.get_config() == config
    assert clone.count_params() == backbone.count_params()


def test_layer_names_follow_the_hugging_face_checkpoint():
    backbone = tiny_llama_backbone()
    paths = {v.path.split("/", 1)[1] for v in backbone.weights}
    assert {"embed_tokens/embeddings", "norm/scale", "lm_head/kernel"} <= paths
    assert "layers_1/q_proj/kernel" in paths and "layers_0/down_proj/kernel" in paths
    tied = tiny_llama_backbone(tie_word_embeddings=True)
    assert not any("lm_head" in v.path for v in tied.weights)


def test_bfloat16_dtype():
    backbone = LlamaBackbone(**TINY_LLAMA, dtype="bfloat16")
    hidden = backbone(np.ones((1, 4), "int32"))
    assert keras.backend.standardize_dtype(hidden.dtype) == "bfloat16"
    assert ops.convert_to_numpy(backbone.compute_logits(hidden)).dtype == np.float32


def test_generate_matches_step_by_step_greedy():
    backbone = tiny_llama_backbone(sliding_window=4)
    lm = LlamaCausalLM(backbone)
    prompt = [5, 9, 2]
    tokens = list(prompt)
    for _ in range(6):
        tokens.append(int(np.argmax(_full_logits(backbone, np.array([tokens]))[-1])))
    assert lm.generate(prompt, max_new_tokens=6, stop_token_ids=None) == tokens


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_key_value_heads"):
        LlamaBackbone(**{**TINY_LLAMA, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="head_dim"):
        LlamaBackbone(**{**TINY_LLAMA, "num_query_heads": 3, "num_key_value_heads": 1})
    with pytest.raises(ValueError, match="sliding_window_layers"):
        LlamaBackbone(**TINY_LLAMA, sliding_window=2, sliding_window_layers=[2])
