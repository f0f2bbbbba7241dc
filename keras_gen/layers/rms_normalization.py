"""Root-mean-square layer normalization, as in Llama."""

import keras
from keras import ops

from keras_gen.layers.lean_call import LeanCall


@keras.saving.register_keras_serializable(package="keras_gen")
class RMSNormalization(LeanCall, keras.layers.Layer):
    """Scale each vector by the inverse of its root mean square.

    The statistics are computed in float32 and the normalized vector is
    cast back to the compute dtype before the learned `scale` multiplies it:
    the order Llama's reference code uses, so bfloat16 results match it.
    With `unit_offset=True` (Gemma) the vector is multiplied by
    `1 + scale` in float32 and cast afterwards, Gemma's order.

    Args:
        epsilon: float, added to the mean square before the square root.
        unit_offset: bool, whether the learned scale is an offset from 1
            (initialized to zeros).

    Call arguments:
        x: `(..., hidden_dim)`.

    Examples:
    >>> norm = RMSNormalization(epsilon=1e-6)
    >>> keras.ops.shape(norm(keras.ops.ones((2, 3, 8))))
    (2, 3, 8)
    """

    def __init__(self, epsilon=1e-6, unit_offset=False, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.unit_offset = unit_offset

    def build(self, input_shape):
        self.scale = self.add_weight(
            name="scale",
            shape=(input_shape[-1],),
            initializer="zeros" if self.unit_offset else "ones",
        )
        self.built = True

    def call(self, x):
        x32 = ops.cast(x, "float32")
        mean_square = ops.mean(ops.square(x32), axis=-1, keepdims=True)
        normalized = x32 * ops.rsqrt(mean_square + self.epsilon)
        if self.unit_offset:
            scale = 1.0 + ops.cast(self.scale, "float32")
            return ops.cast(normalized * scale, x.dtype)
        return ops.cast(normalized, x.dtype) * ops.cast(self.scale, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon, "unit_offset": self.unit_offset})
        return config
