"""Low-rank adapters (LoRA) on a backbone's projections.

An adapted projection computes `x @ (W + (alpha / r) * A @ B)` with the
frozen kernel `W (in, out)` and trainable `A (in, r)`, `B (r, out)`
(Keras' `Dense.enable_lora`, whose variables `lora_kernel_a` and
`lora_kernel_b` are `A` and `B`). Everything else in the backbone is
frozen while adapters are on.
"""

import keras
import numpy as np

from keras_gen.layers.mixture_of_experts import ROUTER_NAME
from keras_gen.utils.checks import check_count
from keras_gen.utils.checks import check_positive

# PEFT's name for "every projection of the blocks".
ALL_LINEAR = "all-linear"
# Keras' names for an adapter's two matrices.
ADAPTER_WEIGHTS = ("lora_kernel_a", "lora_kernel_b")


def projections(backbone):
    """`[(name, Dense)]`: every projection of the blocks that an adapter
    can target (experts' routers excluded), named as the block names it."""
    found = []
    for block in backbone.transformer_layers:
        for layer in block._flatten_layers(include_self=False):
            if isinstance(layer, keras.layers.Dense) and layer.name != ROUTER_NAME:
                found.append((layer.name, layer))
    return found


def adapted(backbone):
    """The projections of `backbone` with an adapter on."""
    return [layer for _, layer in projections(backbone) if layer.lora_enabled]


def targets(backbone, target_modules):
    """The projections `target_modules` names (see `enable_lora`)."""
    available = projections(backbone)
    names = sorted({name for name, _ in available})
    if target_modules is None:
        target_modules = backbone.default_lora_targets()
    if target_modules == ALL_LINEAR:
        target_modules = names
    if isinstance(target_modules, str) or not all(
        isinstance(t, str) for t in target_modules
    ):
        raise TypeError(
            f"`target_modules` must be None, {ALL_LINEAR!r} or a list of "
            f"projection names ({names}). Received: {target_modules!r}"
        )
    unknown = sorted(set(target_modules) - set(names))
    if unknown or not target_modules:
        raise ValueError(
            f"`target_modules` names {unknown or 'nothing'}; this model's "
            f"projections are {names} (or {ALL_LINEAR!r}). Experts' weights "
            "take no adapters."
        )
    return [layer for name, layer in available if name in target_modules]


def enable(backbone, layers, rank, lora_alpha=None):
    """Adapters of `rank` on `layers`; every other weight frozen."""
    rank = check_count("rank", rank)
    if lora_alpha is not None:
        check_positive("lora_alpha", lora_alpha)
    on = [layer.path for layer in layers if layer.lora_enabled]
    if on:
        raise ValueError(
            f"{on[:3]} already have adapters: `merge_lora()` first, or load "
            "a fresh model."
        )
    frozen = list(backbone._lora_frozen)
    for variable in backbone.weights:
        if variable.trainable and not variable.path.endswith(ADAPTER_WEIGHTS):
            variable.trainable = False
            frozen.append(variable.path)
    for layer in layers:
        layer.enable_lora(rank, lora_alpha=rank if lora_alpha is None else lora_alpha)
    backbone._lora_frozen = tuple(frozen)
    backbone.weights_structure += 1


def delta(layer):
    """`(alpha / r) * A @ B` of an adapted `Dense`, as a float32 array."""
    a = keras.ops.convert_to_numpy(layer.lora_kernel_a).astype("float32")
    b = keras.ops.convert_to_numpy(layer.lora_kernel_b).astype("float32")
    return (layer.lora_alpha / layer.lora_rank) * (a @ b)


def merge(backbone):
    """Fold every adapter into its kernel and unfreeze what `enable`
    froze. Returns how many projections were merged."""
    layers = adapted(backbone)
    for layer in layers:
        # Keras merges (and requantizes an int8 kernel, with new scales).
        kernel, scale, _ = layer._get_kernel_with_merged_lora()
        if scale is not None:
            layer.kernel_scale.assign(scale)
        layer._kernel.assign(keras.ops.cast(kernel, layer._kernel.dtype))
        layer._tracker.unlock()
        del layer.lora_kernel_a
        del layer.lora_kernel_b
        layer._tracker.lock()
        layer.lora_enabled = False
    frozen = set(backbone._lora_frozen)
    for variable in backbone.weights:
        if variable.path in frozen:
            variable.trainable = True
    backbone._lora_frozen = []
    backbone.weights_structure += 1
    return len(layers)


def parameter_count(layers):
    """Trainable adapter parameters: `r * (in + out)` per projection."""
    return sum(
        int(np.prod(layer.lora_kernel_a.shape))
        + int(np.prod(layer.lora_kernel_b.shape))
        for layer in layers
    )
