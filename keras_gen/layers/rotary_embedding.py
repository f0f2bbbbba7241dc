"""Rotary position embedding (RoPE) with Llama 3, linear and LongRoPE scaling."""

import math

import keras
import numpy as np
from keras import ops

from keras_gen.layers.lean_call import LeanCall
from keras_gen.utils.checks import check_int
from keras_gen.utils.checks import check_positive


def _llama3_frequencies(
    inverse_frequencies,
    factor,
    low_freq_factor,
    high_freq_factor,
    original_max_position_embeddings,
):
    # Long wavelengths are slowed down by `factor`, short ones kept, and the
    # band between the two interpolated smoothly (Llama 3.1).
    wavelengths = 2 * math.pi / inverse_frequencies
    low_freq_wavelength = original_max_position_embeddings / low_freq_factor
    high_freq_wavelength = original_max_position_embeddings / high_freq_factor
    scaled = np.where(
        wavelengths > low_freq_wavelength,
        inverse_frequencies / factor,
        inverse_frequencies,
    )
    smooth = (original_max_position_embeddings / wavelengths - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelengths >= high_freq_wavelength) & (
        wavelengths <= low_freq_wavelength
    )
    return np.where(medium, smoothed, scaled).astype("float32")


def _linear_frequencies(inverse_frequencies, factor):
    return (inverse_frequencies / factor).astype("float32")


def _longrope_frequencies(
    inverse_frequencies, short_factor, long_factor, original_max_position_embeddings
):
    # Phi-3's LongRoPE: one divisor per frequency, a short set for
    # sequences up to the pretraining length and a long set beyond it.
    for name, factors in (("short_factor", short_factor), ("long_factor", long_factor)):
        if len(factors) != len(inverse_frequencies):
            raise ValueError(
                f"`scaling['{name}']` needs {len(inverse_frequencies)} values "
                f"(head_dim / 2). Received: {len(factors)}"
            )
    short = inverse_frequencies / np.asarray(short_factor, "float32")
    long = inverse_frequencies / np.asarray(long_factor, "float32")
    return short.astype("float32"), long.astype("float32")


def _check_scaling(scaling, keys):
    """Every number of a scaling is finite and > 0 (a count >= 1), and
    llama3's smoothing runs from the low to the high frequency factor."""
    for key in keys + ("attention_factor",):
        value = scaling.get(key)
        name = f"scaling['{key}']"
        if key == "attention_factor" and value is None:
            continue
        if key == "original_max_position_embeddings":
            check_int(name, value, low=1)
        elif key in ("short_factor", "long_factor"):
            if not isinstance(value, (list, tuple)):
                raise TypeError(
                    f"`{name}` must be a list of numbers. Received: {value!r}"
                )
            for factor in value:
                check_positive(name, factor)
        else:
            check_positive(name, value)
    if (
        "low_freq_factor" in keys
        and scaling["low_freq_factor"] >= scaling["high_freq_factor"]
    ):
        raise ValueError(
            "`scaling['low_freq_factor']` must be below `scaling['high_freq_factor']`. "
            f"Received: {scaling}"
        )


# `rope_scaling["rope_type"]` -> (function of the base frequencies, the
# scaling keys it takes). `None` is plain RoPE.
SCALINGS = {
    "linear": (_linear_frequencies, ("factor",)),
    "longrope": (
        _longrope_frequencies,
        ("short_factor", "long_factor", "original_max_position_embeddings"),
    ),
    "llama3": (
        _llama3_frequencies,
        (
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        ),
    ),
}


@keras.saving.register_keras_serializable(package="keras_gen")
class RotaryEmbedding(LeanCall, keras.layers.Layer):
    """Rotate query or key vectors by angles proportional to their position.

    The head dimension is split in two halves that form the real and
    imaginary parts of `head_dim // 2` complex numbers (the Hugging Face
    "rotate half" layout). Angles are computed in float32 and the rotation
    applied in the compute dtype.

    Args:
        head_dim: int, the (even) size of each head.
        max_wavelength: float, the RoPE base (`rope_theta`).
        scaling: `None` or a dict with a `"rope_type"` of `"linear"` (key
            `factor`), `"llama3"` (keys `factor`, `low_freq_factor`,
            `high_freq_factor`, `original_max_position_embeddings`) or
            `"longrope"` (keys `short_factor`, `long_factor`,
            `original_max_position_embeddings`, optionally
            `attention_factor`). LongRoPE rotates with the long factors
            when a call reaches past `original_max_position_embeddings`
            (as transformers does, per forward pass; per row when `index`
            is per row) and scales cos and sin by `attention_factor`.

    Call arguments:
        x: `(batch, heads, length, head_dim)`.
        index: scalar int tensor, the position of `x`'s first token, or a
            `(batch,)` int tensor of one such position per row.

    Examples:
    >>> rope = RotaryEmbedding(head_dim=8)
    >>> keras.ops.shape(rope(keras.ops.ones((1, 2, 3, 8)), index=0))
    (1, 2, 3, 8)
    """

    def __init__(self, head_dim, max_wavelength=10000.0, scaling=None, **kwargs):
        super().__init__(**kwargs)
        if head_dim % 2:
            raise ValueError(
                f"`head_dim` must be even for rotary embeddings. Received: {head_dim}"
            )
        self.head_dim = head_dim
        self.max_wavelength = check_positive("max_wavelength", max_wavelength)
        self.scaling = None if scaling is None else dict(scaling)
        exponents = np.arange(0, head_dim, 2, dtype="float32") / np.float32(head_dim)
        frequencies = (1.0 / (np.float32(max_wavelength) ** exponents)).astype(
            "float32"
        )
        if self.scaling is not None:
            rope_type = self.scaling.get("rope_type")
            if rope_type not in SCALINGS:
                raise ValueError(
                    "`scaling['rope_type']` must be one of "
                    f"{sorted(SCALINGS)}. Received: {self.scaling}"
                )
            function, keys = SCALINGS[rope_type]
            missing = [key for key in keys if key not in self.scaling]
            if missing:
                raise ValueError(
                    f"`scaling` of type {rope_type!r} needs the keys {missing}. "
                    f"Received: {self.scaling}"
                )
            _check_scaling(self.scaling, keys)
            frequencies = function(frequencies, *(self.scaling[k] for k in keys))
        # Constants, not weights: nothing to load or train. Kept as Python
        # floats (exact float32 values) so every backend's compiler reads
        # them as constants; torch.compile cannot trace a numpy array.
        self.long_inverse_frequencies = None
        self.attention_factor = 1.0
        if self.scaling is not None and self.scaling["rope_type"] == "longrope":
            frequencies, long = frequencies
            self.long_inverse_frequencies = tuple(float(f) for f in long)
            self.original_max_position_embeddings = int(
                self.scaling["original_max_position_embeddings"]
            )
            self.attention_factor = float(self.scaling.get("attention_factor") or 1.0)
        self.inverse_frequencies = tuple(float(f) for f in frequencies)
        # No weights: built from the start, so a model quantizes before its
        # first call.
        self.built = True

    def call(self, x, index=0):
        length = ops.shape(x)[2]
        if len(getattr(index, "shape", ())) == 1:
            # Per-row positions: (batch, 1, length), broadcast over heads.
            index = ops.reshape(index, (-1, 1, 1))
        positions = index + ops.arange(length, dtype="int32")
        frequencies = ops.convert_to_tensor(list(self.inverse_frequencies), "float32")
        if self.long_inverse_frequencies is not None:
            long = ops.convert_to_tensor(list(self.long_inverse_frequencies), "float32")
            # Per row with per-row positions: a row's rotation never
            # depends on its neighbours' lengths.
            reach = ops.max(positions, axis=-1, keepdims=True) + 1
            is_long = (reach > self.original_max_position_embeddings)[..., None]
            frequencies = ops.where(is_long, long, frequencies)
        # (..., length, head_dim/2)
        angles = ops.cast(positions, "float32")[..., None] * frequencies
        angles = ops.concatenate([angles, angles], axis=-1)
        cos, sin = ops.cos(angles), ops.sin(angles)
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        cos, sin = ops.cast(cos, x.dtype), ops.cast(sin, x.dtype)
        first, second = ops.split(x, 2, axis=-1)
        rotated = ops.concatenate([-second, first], axis=-1)
        return x * cos + rotated * sin

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "head_dim": self.head_dim,
                "max_wavelength": self.max_wavelength,
                "scaling": self.scaling,
            }
        )
        return config
