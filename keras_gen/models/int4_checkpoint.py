"""GPTQ and AWQ int4 checkpoints into `quantize("int4")` layers.

A Hugging Face folder quantized with GPTQ or AWQ (`quantization_config` in
`config.json`) stores each quantized `Linear` as `qweight` (4-bit values
packed eight to an int32), `qzeros` (the groups' zero points, packed the
same way), `scales` (one per group and output) and, for GPTQ, `g_idx` (the
group of each input, in any order with act-order). The float weight is
`(q - zero[g]) * scale[g]`: exactly what Keras' sub-channel int4 `Dense`
computes, so each such projection becomes an int4 layer holding the
checkpoint's own values (signed: `q - 8`, `zero - 8`). Weights that are
not `Dense` kernels here (stacked experts) are dequantized to floats.
"""

import keras
import numpy as np

SHIFTS = np.arange(0, 32, 4, dtype=np.uint32)
# AutoAWQ's GEMM kernels pack the eight columns of an int32 in this order;
# `AWQ_UNPACK[c]` is the slot that holds column `c`.
AWQ_UNPACK = [0, 4, 1, 5, 2, 6, 3, 7]
METHODS = ("gptq", "awq")


def scheme(config):
    """`(method, group_size, zero_offset)` of a config's int4 quantization,
    or `None` when it has none; a ValueError for one keras-gen cannot read.

    `zero_offset`: GPTQ's original format stores each zero point minus one.
    """
    quantization = config.get("quantization_config")
    if not quantization:
        return None
    if not isinstance(quantization, dict):
        raise TypeError("config.json's quantization_config must be an object.")
    method = quantization.get("quant_method")
    if method not in METHODS:
        raise ValueError(
            f"config.json's quantization_config has quant_method={method!r}; "
            f"keras-gen reads {list(METHODS)} (4-bit) checkpoints."
        )
    bits = quantization.get("bits", quantization.get("w_bit"))
    if bits != 4:
        raise ValueError(f"keras-gen reads 4-bit {method} checkpoints, not {bits}-bit.")
    group_size = quantization.get("group_size", quantization.get("q_group_size"))
    if not isinstance(group_size, int) or isinstance(group_size, bool):
        raise TypeError(f"{method} group_size must be an int. Received: {group_size!r}")
    if method == "awq" and str(quantization.get("version", "gemm")).lower() != "gemm":
        raise ValueError(
            f"keras-gen reads AWQ's GEMM packing; this checkpoint's version is "
            f"{quantization.get('version')!r}."
        )
    offset = 0
    if method == "gptq" and quantization.get("checkpoint_format", "gptq") == "gptq":
        offset = 1
    return method, group_size, offset


def _unpack(packed, axis):
    """4-bit values of int32s, eight each, along `axis` (0 or 1)."""
    packed = np.ascontiguousarray(packed).view(np.uint32)
    if axis == 0:  # (in / 8, out) -> (in, out)
        values = (packed[:, None, :] >> SHIFTS[None, :, None]) & 15
        return values.reshape(-1, packed.shape[1])
    values = (packed[:, :, None] >> SHIFTS[None, None, :]) & 15
    return values.reshape(packed.shape[0], -1)


def read_linear(reader, name, method, group_size, offset):
    """`(values, zero, scale, g_idx)` of quantized `Linear` `name` (its
    prefix, without `.weight`): values `(in, out)` and zeros `(groups,
    out)` unsigned 4-bit, float32 scales `(groups, out)`, int g_idx `(in,)`."""
    qweight = reader.get(f"{name}.qweight")
    qzeros = reader.get(f"{name}.qzeros")
    scale = np.asarray(reader.get(f"{name}.scales"), np.float32)
    if method == "gptq":
        values = _unpack(qweight, axis=0)
        zero = _unpack(qzeros, axis=1) + offset
    else:
        values = _unpack(qweight, axis=1)
        zero = _unpack(qzeros, axis=1)
        values = _awq_order(values)
        zero = _awq_order(zero)
    inputs, outputs = values.shape
    size = inputs if group_size <= 0 else group_size
    g_idx = np.arange(inputs) // size
    if f"{name}.g_idx" in reader:
        g_idx = np.asarray(reader.get(f"{name}.g_idx"), np.int64)
    if not np.isfinite(scale).all():
        raise ValueError(f"{reader.path}: {name!r}.scales holds NaN or inf.")
    if (
        scale.shape != zero.shape
        or scale.shape[1] != outputs
        or g_idx.shape != (inputs,)
        or g_idx.min() < 0
        or g_idx.max() >= scale.shape[0]
    ):
        raise ValueError(
            f"{reader.path}: the {method} tensors of {name!r} do not agree "
            f"(qweight unpacks to {values.shape}, scales {scale.shape}, zeros "
            f"{zero.shape}, g_idx {g_idx.shape})."
        )
    return values.astype(np.int8), zero.astype(np.int8), scale, g_idx


def _awq_order(values):
    rows, columns = values.shape
    return values.reshape(rows, -1, 8)[:, :, AWQ_UNPACK].reshape(rows, columns)


def dequantize(values, zero, scale, g_idx):
    """The float `(in, out)` weight: `(q - zero[g]) * scale[g]`."""
    return (values.astype(np.float32) - zero[g_idx]) * scale[g_idx]


def load_weights(backbone, weight_map, reader, config):
    """Load `weight_map` (a converter's) from a GPTQ or AWQ folder: each
    quantized `Dense` kernel as an int4 layer with the checkpoint's own
    values, the rest as `reader.load_all` does."""
    method, group_size, offset = scheme(config)
    dense_layers = {
        layer._kernel.path: layer
        for layer in backbone._flatten_layers()
        if isinstance(layer, keras.layers.Dense)
    }
    rest = []
    for name, variable, transpose in weight_map:
        names = name if isinstance(name, tuple) else (name,)
        prefixes = [n.removesuffix(".weight") for n in names]
        if f"{prefixes[0]}.qweight" not in reader:
            rest.append((name, variable, transpose))
            continue
        linears = [
            read_linear(reader, prefix, method, group_size, offset)
            for prefix in prefixes
        ]
        layer = None if isinstance(name, tuple) else dense_layers.get(variable.path)
        if layer is None:
            # Stacked experts, or not a Dense kernel here: float weights.
            arrays = [dequantize(*linear) for linear in linears]  # (in, out)
            array = np.stack(arrays) if isinstance(name, tuple) else arrays[0]
            variable.assign(array if transpose else np.swapaxes(array, -1, -2))
            continue
        values, zero, scale, g_idx = linears[0]
        prefix = prefixes[0]
        if tuple(layer.kernel.shape) != values.shape:
            raise ValueError(
                f"{reader.path}: {prefix!r} holds a {values.shape} weight; the "
                f"model built from config.json needs {tuple(layer.kernel.shape)}."
            )
        block_size = values.shape[0] if group_size <= 0 else group_size
        layer.quantize(
            "int4",
            config=keras.quantizers.Int4QuantizationConfig(block_size=block_size),
        )
        if tuple(layer.kernel_scale.shape) != scale.shape:
            raise ValueError(
                f"{reader.path}: {prefix!r} has {scale.shape[0]} groups; groups "
                f"of {block_size} make {layer.kernel_scale.shape[0]}."
            )
        signed = (values.astype(np.int16) - 8).astype(np.int8)
        packed, _, _ = keras.quantizers.pack_int4(signed, axis=-1)
        layer._kernel.assign(packed)
        layer.kernel_scale.assign(scale)
        layer.kernel_zero.assign((zero.astype(np.int16) - 8).astype(np.int8))
        layer.g_idx.assign(g_idx.astype(np.float32))
    reader.load_all(rest)
