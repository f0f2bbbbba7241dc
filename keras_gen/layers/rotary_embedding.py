"""Rotary position embedding (RoPE): linear, Llama 3, YaRN, dynamic NTK and
LongRoPE scaling, and partial rotation."""

import math

import keras
import numpy as np
from keras import ops

from keras_gen.layers.lean_call import LeanCall
from keras_gen.utils.checks import check_int
from keras_gen.utils.checks import check_positive


def _llama3_frequencies(inverse_frequencies, scaling, base):
    # Long wavelengths are slowed down by `factor`, short ones kept, and the
    # band between the two interpolated smoothly (Llama 3.1).
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelengths = 2 * math.pi / inverse_frequencies
    low_freq_wavelength = original / low_freq_factor
    high_freq_wavelength = original / high_freq_factor
    scaled = np.where(
        wavelengths > low_freq_wavelength,
        inverse_frequencies / factor,
        inverse_frequencies,
    )
    smooth = (original / wavelengths - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelengths >= high_freq_wavelength) & (
        wavelengths <= low_freq_wavelength
    )
    return np.where(medium, smoothed, scaled).astype("float32")


def _linear_frequencies(inverse_frequencies, scaling, base):
    return (inverse_frequencies / scaling["factor"]).astype("float32")


def _longrope_frequencies(inverse_frequencies, scaling, base):
    # Phi-3's LongRoPE: one divisor per frequency, a short set for
    # sequences up to the pretraining length and a long set beyond it.
    for name in ("short_factor", "long_factor"):
        if len(scaling[name]) != len(inverse_frequencies):
            raise ValueError(
                f"`scaling['{name}']` needs {len(inverse_frequencies)} values "
                f"(rotary dimensions / 2). Received: {len(scaling[name])}"
            )
    short = inverse_frequencies / np.asarray(scaling["short_factor"], "float32")
    long = inverse_frequencies / np.asarray(scaling["long_factor"], "float32")
    return short.astype("float32"), long.astype("float32")


def _yarn_frequencies(inverse_frequencies, scaling, base):
    # YaRN: frequencies that turn fewer than `beta_slow` times over the
    # pretraining length are interpolated (divided by `factor`), those that
    # turn more than `beta_fast` times are kept, with a linear ramp between
    # the two (as transformers computes it, bounds rounded unless
    # `truncate` is false).
    dim = 2 * len(inverse_frequencies)
    factor = scaling["factor"]
    original = scaling["original_max_position_embeddings"]

    def dimension(rotations):
        return (
            dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))
        )

    low = dimension(scaling.get("beta_fast") or 32)
    high = dimension(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip(
        (np.arange(dim // 2, dtype="float32") - low) / (high - low), 0, 1
    ).astype("float32")
    kept = 1 - ramp
    interpolated = inverse_frequencies / np.float32(factor)
    return (interpolated * (1 - kept) + inverse_frequencies * kept).astype("float32")


def _yarn_attention_factor(scaling):
    """YaRN's scale of cos and sin when the config names none: `0.1 ln(s) + 1`,
    or the ratio of two such terms with `mscale` and `mscale_all_dim`."""

    def mscale(scale, weight=1.0):
        return 1.0 if scale <= 1 else 0.1 * weight * math.log(scale) + 1.0

    factor = scaling["factor"]
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return mscale(factor, scaling["mscale"]) / mscale(
            factor, scaling["mscale_all_dim"]
        )
    return mscale(factor)


def _check_scaling(scaling, keys):
    """Every number of a scaling is finite and > 0 (a count >= 1), and
    llama3's smoothing runs from the low to the high frequency factor."""
    optional = (
        "attention_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
    )
    for key in keys + optional:
        value = scaling.get(key)
        name = f"scaling['{key}']"
        if key in optional and value is None:
            continue
        if key in ("mscale", "mscale_all_dim") and value == 0:
            continue  # as transformers reads it: not given
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
    if not isinstance(scaling.get("truncate", True), bool):
        raise TypeError(
            f"`scaling['truncate']` must be a bool. Received: {scaling['truncate']!r}"
        )
    if (
        "low_freq_factor" in keys
        and scaling["low_freq_factor"] >= scaling["high_freq_factor"]
    ):
        raise ValueError(
            "`scaling['low_freq_factor']` must be below `scaling['high_freq_factor']`. "
            f"Received: {scaling}"
        )


# `rope_scaling["rope_type"]` -> (function of the base frequencies, the
# scaling and the base, or `None` where the frequencies depend on the call;
# the scaling keys it needs). `None` is plain RoPE.
SCALINGS = {
    "linear": (_linear_frequencies, ("factor",)),
    "dynamic": (None, ("factor", "original_max_position_embeddings")),
    "yarn": (_yarn_frequencies, ("factor", "original_max_position_embeddings")),
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

    The rotated dimensions are split in two halves that form the real and
    imaginary parts of complex numbers (the Hugging Face "rotate half"
    layout). Angles are computed in float32 and the rotation applied in the
    compute dtype.

    Args:
        head_dim: int, the (even) size of each head.
        max_wavelength: float, the RoPE base (`rope_theta`).
        scaling: `None` or a dict with a `"rope_type"` of:
            - `"linear"` (key `factor`): every frequency divided by it.
            - `"llama3"` (keys `factor`, `low_freq_factor`,
              `high_freq_factor`, `original_max_position_embeddings`).
            - `"yarn"` (keys `factor`, `original_max_position_embeddings`;
              optionally `beta_fast` (32), `beta_slow` (1), `truncate`
              (True), `attention_factor`, or `mscale` and `mscale_all_dim`
              from which it follows): slow frequencies interpolated, fast
              ones kept, cos and sin scaled by `attention_factor` (by
              default `0.1 ln(factor) + 1`).
            - `"dynamic"` (keys `factor`, `original_max_position_embeddings`):
              dynamic NTK, the base raised when a call reaches past
              `original_max_position_embeddings` positions, from the
              furthest position the call reaches.
            - `"longrope"` (keys `short_factor`, `long_factor`,
              `original_max_position_embeddings`, optionally
              `attention_factor`): the long factors when a call reaches
              past `original_max_position_embeddings`, cos and sin scaled
              by `attention_factor`.
            Where the frequencies depend on the call (dynamic, longrope),
            they follow the call's furthest position, as transformers does
            per forward pass, and each row's own when `index` is per row.
        partial_rotary_factor: float in (0, 1], the leading share of each
            head that rotates (`int(head_dim * partial_rotary_factor)`
            dimensions, an even count); the rest passes through (Phi-4-mini:
            0.75).

    Call arguments:
        x: `(batch, heads, length, head_dim)`.
        index: scalar int tensor, the position of `x`'s first token, or a
            `(batch,)` int tensor of one such position per row.

    Examples:
    >>> rope = RotaryEmbedding(head_dim=8)
    >>> keras.ops.shape(rope(keras.ops.ones((1, 2, 3, 8)), index=0))
    (1, 2, 3, 8)
    """

    def __init__(
        self,
        head_dim,
        max_wavelength=10000.0,
        scaling=None,
        partial_rotary_factor=1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if head_dim % 2:
            raise ValueError(
                f"`head_dim` must be even for rotary embeddings. Received: {head_dim}"
            )
        self.head_dim = head_dim
        self.max_wavelength = check_positive("max_wavelength", max_wavelength)
        self.partial_rotary_factor = check_positive(
            "partial_rotary_factor", partial_rotary_factor
        )
        # transformers' rounding: the rotated share, rounded down.
        self.rotary_dim = int(head_dim * partial_rotary_factor)
        if partial_rotary_factor > 1 or self.rotary_dim < 2 or self.rotary_dim % 2:
            raise ValueError(
                "`partial_rotary_factor` must be in (0, 1] and leave an even "
                f"number (>= 2) of the {head_dim} head dimensions rotated. "
                f"Received: {partial_rotary_factor} ({self.rotary_dim} dimensions)"
            )
        self.scaling = None if scaling is None else dict(scaling)
        exponents = np.arange(0, self.rotary_dim, 2, dtype="float32") / np.float32(
            self.rotary_dim
        )
        frequencies = (1.0 / (np.float32(max_wavelength) ** exponents)).astype(
            "float32"
        )
        rope_type = None
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
            if rope_type == "dynamic" and self.rotary_dim < 4:
                raise ValueError(
                    "Dynamic NTK scaling needs at least 4 rotated dimensions "
                    f"(its exponent is d / (d - 2)). Received: {self.rotary_dim}"
                )
            if function is not None:
                frequencies = function(frequencies, self.scaling, max_wavelength)
        # Constants, not weights: nothing to load or train. Kept as Python
        # floats (exact float32 values) so every backend's compiler reads
        # them as constants; torch.compile cannot trace a numpy array.
        self.long_inverse_frequencies = None
        self.attention_factor = 1.0
        if rope_type in ("longrope", "dynamic"):
            self.original_max_position_embeddings = int(
                self.scaling["original_max_position_embeddings"]
            )
        if rope_type == "longrope":
            frequencies, long = frequencies
            self.long_inverse_frequencies = tuple(float(f) for f in long)
        if rope_type in ("longrope", "yarn"):
            factor = self.scaling.get("attention_factor")
            if factor is None and rope_type == "yarn":
                factor = _yarn_attention_factor(self.scaling)
            self.attention_factor = float(factor or 1.0)
        self.inverse_frequencies = tuple(float(f) for f in frequencies)
        # The same numbers as tensors made once, here: a compiled step reads
        # them as inputs. (Made inside torch's step, inside a block's
        # compiled region, Inductor left tables of 64 numbers unbound.)
        self._tables = tuple(
            None if table is None else ops.convert_to_tensor(list(table), "float32")
            for table in (self.inverse_frequencies, self.long_inverse_frequencies)
        )
        # No weights: built from the start, so a model quantizes before its
        # first call.
        self.built = True

    def call(self, x, index=0):
        length = ops.shape(x)[2]
        if len(getattr(index, "shape", ())) == 1:
            # Per-row positions: (batch, 1, length), broadcast over heads.
            index = ops.reshape(index, (-1, 1, 1))
        positions = index + ops.arange(length, dtype="int32")
        frequencies, long = self._tables
        # The call's furthest position + 1 (positions rise), per row with
        # per-row positions: a row's rotation never depends on its
        # neighbours' lengths.
        reach = positions[..., -1:] + 1
        if long is not None:
            is_long = (reach > self.original_max_position_embeddings)[..., None]
            frequencies = ops.where(is_long, long, frequencies)
        elif self.scaling is not None and self.scaling["rope_type"] == "dynamic":
            frequencies = self._dynamic_frequencies(reach)
        # (..., length, rotary_dim/2)
        angles = ops.cast(positions, "float32")[..., None] * frequencies
        angles = ops.concatenate([angles, angles], axis=-1)
        cos, sin = ops.cos(angles), ops.sin(angles)
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        cos, sin = ops.cast(cos, x.dtype), ops.cast(sin, x.dtype)
        passed = None
        if self.rotary_dim < self.head_dim:
            x, passed = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        first, second = ops.split(x, 2, axis=-1)
        rotated = ops.concatenate([-second, first], axis=-1)
        x = x * cos + rotated * sin
        return x if passed is None else ops.concatenate([x, passed], axis=-1)

    def _dynamic_frequencies(self, reach):
        """Dynamic NTK's frequencies for calls reaching `reach` positions
        (`(1,)`, or `(batch, 1, 1)` per row): the base times
        `(factor * reach / original - (factor - 1)) ** (d / (d - 2))`, with
        `reach` at least `original` (so the base is unchanged up to it)."""
        original = self.original_max_position_embeddings
        factor = float(self.scaling["factor"])
        dim = self.rotary_dim
        reach = ops.maximum(ops.cast(reach, "float32"), float(original))
        base = self.max_wavelength * ops.power(
            factor * reach / original - (factor - 1), dim / (dim - 2)
        )
        exponents = ops.arange(0, dim, 2, dtype="float32") / dim
        return 1.0 / ops.power(base[..., None], exponents)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "head_dim": self.head_dim,
                "max_wavelength": self.max_wavelength,
                "scaling": self.scaling,
                "partial_rotary_factor": self.partial_rotary_factor,
            }
        )
        return config
