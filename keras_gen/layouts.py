"""Where weights and the key/value cache live on a `keras.distribution` mesh.

A backbone's `get_layout_map` lists, per weight, which axis of the device
mesh splits which dimension (Megatron-style tensor parallelism over the
model axis; weights are whole on every data-parallel replica). The key/value
cache and the attention inputs are laid out inside the compiled program by
`shard_heads` (batch over the data axis, heads over the model axis), the
token ids by `shard_batch`. Both read the active distribution
(`keras.distribution.distribution()`) and do nothing without one.
"""

import contextlib
import re

import keras

from keras_gen import backend

# The layout map entry of the key/value cache and of the attention inputs,
# all `(batch, heads, length, head_dim)`. Not a variable path: no weight or
# layer output is named so.
HEADS_KEY = "key_value_cache"


class LayoutMap(keras.distribution.LayoutMap):
    """A `keras.distribution.LayoutMap` whose rules may list fallbacks.

    `alternatives[pattern]` holds further axes for a rule's weights, tried
    in turn when the mesh does not divide the first choice (see
    `fitted_layouts`).
    """

    def __init__(self, device_mesh):
        super().__init__(device_mesh)
        self.alternatives = {}


def make_layout_map(device_mesh, rules, model_axis, data_axis):
    """A `LayoutMap` from `(path regex, axes)` rules.

    `axes` may be a list of choices, best first: a weight takes the first
    that the mesh divides (see `fitted_layouts`). Adds the `HEADS_KEY`
    entry `(data_axis, model_axis, None, None)`.
    """
    for axis in (model_axis, data_axis):
        if axis not in device_mesh.axis_names:
            raise ValueError(
                f"The device mesh has no axis {axis!r}. Its axes are "
                f"{list(device_mesh.axis_names)}; pass the names of its model "
                "and data axes as `model_parallel_dim_name` and "
                "`data_parallel_dim_name`."
            )
    layout_map = LayoutMap(device_mesh)
    for pattern, axes in rules:
        choices = axes if isinstance(axes, list) else [axes]
        layout_map[pattern] = choices[0]
        layout_map.alternatives[pattern] = choices[1:]
    layout_map[HEADS_KEY] = (data_axis, model_axis, None, None)
    return layout_map


def _divides(axes, shape, mesh):
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    return all(axis is None or dim % sizes[axis] == 0 for axis, dim in zip(axes, shape))


def _rule(layout_map, path):
    """The key of `layout_map` that names `path` (as Keras looks it up)."""
    keys = list(layout_map)  # `in` would match every path: lookups never fail
    if path in keys:
        return path
    return next((key for key in keys if re.fullmatch(key, path)), None)


class _FittedDistribution:
    """A `ModelParallel` distribution whose variable layouts fit their shapes.

    Stands in for the active distribution while a backbone creates its
    weights: a rule's axes are used where the mesh divides the weight's
    dimensions; otherwise its next choice that it divides; otherwise the
    first choice with each dimension it does not divide left whole. It
    records the kernels and embeddings (weights of 2 or more dimensions)
    that no rule names.
    """

    def __init__(self, distribution):
        self.distribution = distribution
        self.named = 0
        self.unnamed = []

    def __getattr__(self, name):
        return getattr(self.distribution, name)

    def get_variable_layout(self, variable):
        layout_map = self.distribution._layout_map
        key = _rule(layout_map, variable.path)
        if key is None:
            if len(variable.shape) >= 2:
                self.unnamed.append(variable.path)
            return self.distribution.get_variable_layout(variable)
        self.named += 1
        first = layout_map[key]
        shape = tuple(variable.shape)
        mesh = first.device_mesh
        for axes in [first.axes, *getattr(layout_map, "alternatives", {}).get(key, ())]:
            if _divides(axes, shape, mesh):
                return keras.distribution.TensorLayout(axes, mesh)
        return _fit(first, shape)


@contextlib.contextmanager
def fitted_layouts(owner):
    """Weights created inside get layouts fitted to their shapes (see
    `_FittedDistribution`) under a `keras.distribution.ModelParallel`;
    nothing changes otherwise.

    Raises:
        ValueError: the layout map names none of `owner`'s kernels and
            embeddings, or leaves some of them unnamed (a map made for
            another family), naming them.
    """
    distribution = keras.distribution.distribution()
    if not isinstance(distribution, keras.distribution.ModelParallel):
        yield
        return
    fitted = _FittedDistribution(distribution)
    keras.distribution.set_distribution(fitted)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)
    if fitted.unnamed:
        what = "none" if not fitted.named else f"{len(fitted.unnamed)}"
        raise ValueError(
            f"The layout map names {what} of {owner}'s kernels and embeddings: "
            f"{fitted.unnamed[:4]}{' ...' if len(fitted.unnamed) > 4 else ''} would "
            f"be whole on every device. Make the map with `{owner}.get_layout_map"
            "(mesh)` (or `lm.backbone.get_layout_map(mesh)`), or give those "
            "weights rules of their own (axes of None keep a weight whole)."
        )


def _fit(layout, shape):
    # A dimension that a mesh axis does not divide is left whole (e.g. one
    # prompt on a data axis of 8, or 4 key/value heads on a model axis of 8).
    mesh = layout.device_mesh
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    axes = tuple(
        axis
        if axis is None or (isinstance(dim, int) and dim % sizes[axis] == 0)
        else None
        for axis, dim in zip(layout.axes, shape)
    )
    return keras.distribution.TensorLayout(axes, mesh)


def heads_layout(shape):
    """The layout of a `(batch, heads, length, head_dim)` tensor, or `None`.

    `ModelParallel`: the layout map's `HEADS_KEY` entry (see
    `make_layout_map`), or batch over the data axis if the map has none.
    `DataParallel`: batch over the data axis. No distribution: `None`.
    """
    distribution = keras.distribution.distribution()
    if distribution is None:
        return None
    layout = distribution.get_tensor_layout(HEADS_KEY)
    if layout is None:
        layout = distribution.get_data_layout(shape)
    return _fit(layout, shape)


def batch_layout(shape):
    """The layout of a tensor whose first dimension is the batch, or `None`."""
    distribution = keras.distribution.distribution()
    if distribution is None:
        return None
    return _fit(distribution.get_data_layout(shape), shape)


def shard_heads(x):
    """`x`, `(batch, heads, length, head_dim)`, laid out by `heads_layout`."""
    return backend.distribute_tensor(x, heads_layout(tuple(x.shape)))


def shard_batch(x):
    """`x` split over the data axis along its first dimension."""
    return backend.distribute_tensor(x, batch_layout(tuple(x.shape)))
