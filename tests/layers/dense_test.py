import keras
import numpy as np
import pytest

from keras_gen.layers import Dense


def _layers(quantize_activations, **kwargs):
    """A `keras_gen.layers.Dense` and a Keras `Dense` with the same int8
    weights."""
    config = keras.quantizers.Int8QuantizationConfig(
        weight_quantizer=keras.quantizers.AbsMaxQuantizer(axis=0),
        activation_quantizer=(
            keras.quantizers.AbsMaxQuantizer(axis=-1) if quantize_activations else None
        ),
    )
    ours, theirs = Dense(5, **kwargs), keras.layers.Dense(5, **kwargs)
    for layer in (ours, theirs):
        layer.build((None, 17))
    theirs.set_weights(ours.get_weights())
    for layer in (ours, theirs):
        layer.quantize("int8", config=config)
    return ours, theirs


@pytest.mark.parametrize("quantize_activations", [True, False])
def test_int8_call_computes_what_keras_int8_dense_computes(quantize_activations):
    ours, theirs = _layers(quantize_activations, activation="relu")
    assert (ours.inputs_quantizer is None) != quantize_activations
    x = np.random.default_rng(0).normal(size=(2, 3, 17)).astype("float32")
    expected = keras.ops.convert_to_numpy(theirs(x))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(ours(x)), expected, rtol=1e-5, atol=1e-5
    )
    # Training takes Keras' own path (its gradient reaches the inputs).
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(ours(x, training=True)),
        expected,
        rtol=1e-5,
        atol=1e-5,
    )


def test_int8_layer_survives_serialization():
    ours, _ = _layers(True)
    x = np.random.default_rng(1).normal(size=(2, 17)).astype("float32")
    model = keras.Sequential([keras.Input((17,)), ours])
    restored = keras.Sequential.from_config(model.get_config())
    restored.set_weights(model.get_weights())
    assert isinstance(restored.layers[0], Dense)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(restored(x)),
        keras.ops.convert_to_numpy(model(x)),
        rtol=1e-6,
        atol=1e-6,
    )


# One row, a few, many: torch multiplies them in different forms.
@pytest.mark.parametrize("rows", [1, 3, 9])
def test_float_call_computes_what_keras_dense_computes(rows):
    ours, theirs = Dense(5, activation="gelu"), keras.layers.Dense(5, activation="gelu")
    for layer in (ours, theirs):
        layer.build((None, 17))
    theirs.set_weights(ours.get_weights())
    x = np.random.default_rng(2).normal(size=(rows, 17)).astype("float32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(ours(x)),
        keras.ops.convert_to_numpy(theirs(x)),
        rtol=1e-5,
        atol=1e-5,
    )
