"""The shared decoder block: its options and their errors."""

import numpy as np
import pytest
from keras import ops

from keras_gen.layers.decoder_block import DecoderBlock
from keras_gen.layers.rotary_embedding import RotaryEmbedding

SIZES = dict(
    num_query_heads=4,
    num_key_value_heads=2,
    hidden_dim=16,
    intermediate_dim=24,
    head_dim=8,
)


def _block(**options):
    block = DecoderBlock(**SIZES, rotary_embedding=RotaryEmbedding(8), **options)
    block.build((None, None, 16))
    return block


@pytest.mark.parametrize(
    "options, sublayers",
    [
        ({}, {"input_layernorm", "post_attention_layernorm", "q_proj", "gate_proj"}),
        (
            {"norm_placement": "sandwich", "query_key_norm": "head"},
            {"pre_feedforward_layernorm", "post_feedforward_layernorm", "q_norm"},
        ),
        (
            {"norm_placement": "post"},
            {"post_attention_layernorm", "post_feedforward_layernorm"},
        ),
        ({"fused_projections": True}, {"qkv_proj", "gate_up_proj", "down_proj"}),
        ({"num_experts": 4}, {"mlp", "o_proj"}),
    ],
)
def test_options_build_the_checkpoint_sublayers(options, sublayers):
    block = _block(**options)
    names = {layer.name for layer in block._layers}
    assert sublayers <= names
    x = ops.ones((2, 3, 16))
    outputs, cache = block(x)
    assert ops.shape(outputs) == (2, 3, 16) and cache is None
    assert np.all(np.isfinite(ops.convert_to_numpy(outputs)))


def test_post_norm_block_has_no_input_norm():
    assert not hasattr(_block(norm_placement="post"), "input_layernorm")


@pytest.mark.parametrize(
    "options, match",
    [
        ({"norm_placement": "middle"}, "norm_placement"),
        ({"query_key_norm": "both"}, "query_key_norm"),
        ({"activation": "relu"}, "activation"),
    ],
)
def test_bad_options_are_named(options, match):
    with pytest.raises(ValueError, match=match):
        _block(**options)
