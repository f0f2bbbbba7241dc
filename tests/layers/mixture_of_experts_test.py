"""Routed experts: both ways of computing agree, routing is transformers'."""

import numpy as np
import pytest
from keras import ops

from keras_gen.layers.mixture_of_experts import MixtureOfExperts
from keras_gen.models import MixtralBackbone
from keras_gen.models import MixtralCausalLM


def _layer(normalize=True, seed=0):
    layer = MixtureOfExperts(
        num_experts=6,
        num_experts_per_token=2,
        intermediate_dim=16,
        normalize_weights=normalize,
    )
    layer.build((None, None, 8))
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    return layer, rng


@pytest.mark.parametrize("normalize", [True, False])
def test_gathered_and_dense_experts_agree(normalize):
    layer, rng = _layer(normalize)
    x = ops.convert_to_tensor(rng.normal(size=(5, 8)).astype("float32"))
    weights, experts = layer.route(x)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer._gathered(x, weights, experts)),
        ops.convert_to_numpy(layer._dense(x, weights, experts)),
        rtol=1e-5,
        atol=1e-5,
    )
    # Two tokens (4 pairs < 6 experts) take the gathered way, 5 the dense.
    one = ops.convert_to_numpy(layer(x[None, :2]))[0]
    np.testing.assert_allclose(
        one, ops.convert_to_numpy(layer(x[None]))[0, :2], atol=1e-5
    )


def test_routing_weights_sum_to_one_only_when_normalized():
    for normalize in (True, False):
        layer, rng = _layer(normalize)
        weights, experts = layer.route(rng.normal(size=(32, 8)).astype("float32"))
        sums = ops.convert_to_numpy(ops.sum(weights, axis=-1))
        assert np.allclose(sums, 1.0) == normalize
        counts = np.bincount(ops.convert_to_numpy(experts).ravel(), minlength=6)
        # Random tokens spread unevenly over the experts.
        assert len(set(counts)) > 1


def test_routing_equals_transformers():
    hf_models = pytest.importorskip("tests.models.hf_models")
    torch = hf_models.torch
    model = hf_models.make_model("mixtral")
    block = model.model.layers[0].mlp
    layer = MixtureOfExperts(
        num_experts=4, num_experts_per_token=2, intermediate_dim=64
    )
    layer.build((None, None, 32))
    layer.router.kernel.assign(block.gate.weight.detach().numpy().T)
    hidden = np.random.default_rng(0).normal(size=(40, 32)).astype("float32")
    with torch.no_grad():
        _, scores, indices = block.gate(torch.as_tensor(hidden))
    weights, experts = layer.route(hidden)
    order = np.argsort(indices.numpy(), axis=-1)
    ours = np.argsort(ops.convert_to_numpy(experts), axis=-1)
    np.testing.assert_array_equal(
        np.take_along_axis(ops.convert_to_numpy(experts), ours, -1),
        np.take_along_axis(indices.numpy(), order, -1),
    )
    np.testing.assert_allclose(
        np.take_along_axis(ops.convert_to_numpy(weights), ours, -1),
        np.take_along_axis(scores.numpy(), order, -1),
        atol=1e-6,
    )


def test_experts_decode_without_recompiling(traces):
    lm = MixtralCausalLM(
        MixtralBackbone(
            vocabulary_size=40,
            num_layers=2,
            num_query_heads=2,
            num_key_value_heads=1,
            hidden_dim=16,
            intermediate_dim=16,
            num_experts=4,
        )
    )
    first = lm.generate([[1, 2, 3], [4]], max_new_tokens=6)
    second = lm.generate([[7, 8], [9, 10, 11]], max_new_tokens=6)
    assert len(first) == len(second) == 2
    assert traces() == 1


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_experts_per_token"):
        MixtureOfExperts(num_experts=2, num_experts_per_token=3, intermediate_dim=4)
    with pytest.raises(ValueError, match="activation"):
        MixtureOfExperts(
            num_experts=2,
            num_experts_per_token=1,
            intermediate_dim=4,
            activation="relu",
        )
