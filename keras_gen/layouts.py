"""Where weights and the key/value cache live on a `keras.distribution` mesh.

A backbone's `get_layout_map` lists, per weight, which axis of the device
mesh splits which dimension (Megatron-style tensor parallelism over the
model axis; weights are whole on every data-parallel replica). The key/value
cache and the attention inputs are laid out inside the compiled program by
`shard_heads` (batch over the data axis, heads over the model axis), the
token ids by `shard_batch`. Both read the active distribution
(`keras.distribution.distribution()`) and do nothing without one.
"""

import keras

from keras_gen import backend

# The layout map entry of the key/value cache and of the attention inputs,
# all `(batch, heads, length, head_dim)`. Not a variable path: no weight or
# layer output is named so.
HEADS_KEY = "key_value_cache"


def make_layout_map(device_mesh, rules, model_axis, data_axis):
    """A `keras.distribution.LayoutMap` from `(path regex, axes)` rules.

    Adds the `HEADS_KEY` entry `(data_axis, model_axis, None, None)`.
    Weights that no rule names are replicated.
    """
    for axis in (model_axis, data_axis):
        if axis not in device_mesh.axis_names:
            raise ValueError(
                f"The device mesh has no axis {axis!r}. Its axes are "
                f"{list(device_mesh.axis_names)}; pass the names of its model "
                "and data axes as `model_parallel_dim_name` and "
                "`data_parallel_dim_name`."
            )
    layout_map = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in rules:
        layout_map[pattern] = axes
    layout_map[HEADS_KEY] = (data_axis, model_axis, None, None)
    return layout_map


def _fit(layout, shape):
    # A dimension that a mesh axis does not divide is left whole (e.g. one
    # prompt on a data axis of 8, or 4 key/value heads on a model axis of 8).
    mesh = layout.device_mesh
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    axes = tuple(
        axis if axis is None or (isinstance(dim, int) and dim % sizes[axis] == 0)
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
