"""Root-mean-square layer normalization, as in Llama."""

import keras
from keras import ops


class RMSNormalization(keras.layers.Layer):
    """Scale each vector by the inverse of its root mean square.

    The statistics are computed in float32 and the normalized vector is
    cast back to the compute dtype before the learned `scale` multiplies it:
    the order Llama's reference code uses, so bfloat16 results match it.

    Args:
        epsilon: float, added to the mean square before the square root.

    Call arguments:
        x: `(..., hidden_dim)`.

    Examples:
    >>> norm = RMSNormalization(epsilon=1e-6)
    >>> keras.ops.shape(norm(keras.ops.ones((2, 3, 8))))
    (2, 3, 8)
    """

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.scale = self.add_weight(
            name="scale", shape=(input_shape[-1],), initializer="ones"
        )
        self.built = True

    def call(self, x):
        x32 = ops.cast(x, "float32")
        mean_square = ops.mean(ops.square(x32), axis=-1, keepdims=True)
        normalized = ops.cast(x32 * ops.rsqrt(mean_square + self.epsilon), x.dtype)
        return normalized * ops.cast(self.scale, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config
