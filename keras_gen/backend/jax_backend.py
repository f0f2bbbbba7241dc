"""The JAX backend: `jax.jit` over explicit variable values."""

import contextlib
import os

import jax
import keras
from jax._src import xla_bridge

from keras_gen import backend

# XLA partitions a compiled program across a `keras.distribution` mesh.
DISTRIBUTED = True

# A program's loops may run over caches of growing length, all compiled
# into the one program (see `backend.grows_caches`).
GROWS_CACHES = True

# An Engine compiles a program per row and length bucket.
COMPILES_EACH_SHAPE = False

# XLA's CPU compiler copies a loop's carried key/value caches (two copies of
# each layer's cache a step, and one more of its keys); with copy insertion's
# region analysis it finds more of them needless (the copies in GPT-2
# small's step after a 512-token prompt: 48 -> 36). Measured on 2 cores:
# decode after a 512-token prompt 33.7 -> 31.0 ms per step, batch 1 27.1
# -> 24.8, batch 2 and 8 unchanged. XLA reads its flags once, when JAX
# first starts its CPU client: a process that computed before importing
# keras-gen keeps its own flags, and a flag the user set stays as set.
REGION_ANALYSIS = "--xla_cpu_copy_insertion_use_region_analysis"
if REGION_ANALYSIS not in os.environ.get("XLA_FLAGS", "") and not xla_bridge._backends:
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" {REGION_ANALYSIS}=true"
    ).strip()

# See `backend.shortest_cache_bucket`.
SHORTEST_CACHE_BUCKET = 64

# Compiled programs persist in JAX's compilation cache.
KEEPS_PROGRAMS = True

# The most disk the persistent compilation cache takes (oldest dropped).
CACHE_BYTES = 2 << 30


def use_compilation_cache(path):
    # JAX's persistent cache, unless the user set up their own.
    if path is None or jax.config.jax_compilation_cache_dir:
        return
    jax.config.update("jax_compilation_cache_dir", path)
    # Every program, however quick to compile: a start-up needs them all.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_compilation_cache_max_size", CACHE_BYTES)


def background_compiles():
    return 0  # a whole program compiles where it is first called


def compiling_python():
    # `jax.jit` traces by running the Python: Keras' calls cost little.
    return False


def compile_function(
    fn, variables, jit_compile=True, static_argnames=(), donate_argnums=()
):
    variables = list(variables)

    def stateless_fn(values, *args, **kwargs):
        backend.count_trace()
        mapping = zip(variables, values)
        with keras.StatelessScope(state_mapping=mapping):
            return fn(*args, **kwargs)

    if jit_compile:
        stateless_fn = jax.jit(
            stateless_fn,
            static_argnames=static_argnames,
            # Shifted past the variable values, which are never donated.
            donate_argnums=tuple(i + 1 for i in donate_argnums),
        )

    def call(*args, **kwargs):
        # `.value` keeps the sharding a distribution gave each variable.
        return stateless_fn([v.value for v in variables], *args, **kwargs)

    return call


def while_loop(cond, body, loop_state, jit_compile=True):
    return jax.lax.while_loop(cond, body, loop_state)


def call_block(block, x, cache, index):
    return block(x, cache=cache, index=index)


def cond(pred, true_fn, false_fn, *operands):
    return jax.lax.cond(pred, true_fn, false_fn, *operands)


def slice(x, start, length, axis):
    return jax.lax.dynamic_slice_in_dim(x, start, length, axis=axis)


def update_slice(x, update, start, axis, donate=False):
    return jax.lax.dynamic_update_slice_in_dim(x, update, start, axis=axis)


def update_rows(x, update, starts, axis, donate=False):
    starts = jax.numpy.asarray(starts, "int32")
    if x.shape[0] != update.shape[0]:
        # A scatter into the first rows: index arrays over axes 0..axis
        # that broadcast to `update.shape[:axis + 1]`.
        indices = []
        for dim in range(axis + 1):
            shape = [1] * (axis + 1)
            shape[dim] = update.shape[dim]
            index = jax.numpy.arange(update.shape[dim], dtype="int32").reshape(shape)
            if dim == axis:
                index = index + starts.reshape([-1] + [1] * axis)
            indices.append(index)
        return x.at[tuple(indices)].set(update.astype(x.dtype))

    def update_row(row, row_update, start):
        return jax.lax.dynamic_update_slice_in_dim(
            row, row_update.astype(row.dtype), start, axis=axis - 1
        )

    return jax.vmap(update_row)(x, update, starts)


def update_block(x, update, starts, donate=False):
    return jax.lax.dynamic_update_slice(x, update.astype(x.dtype), tuple(starts))


def count_tokens(token_ids, weights, vocabulary_size):
    jnp = jax.numpy
    token_ids = jnp.asarray(token_ids, "int32")
    weights = jnp.asarray(weights, "float32")
    valid = (token_ids >= 0) & (token_ids < vocabulary_size)
    rows = jnp.arange(token_ids.shape[0])[:, None]
    counts = jnp.zeros((token_ids.shape[0], vocabulary_size), "float32")
    return counts.at[rows, jnp.where(valid, token_ids, 0)].add(
        jnp.where(valid, weights, 0.0)
    )


def uniform(shape, seed):
    key = jax.random.wrap_key_data(
        jax.numpy.asarray(seed).astype("uint32"), impl="threefry2x32"
    )
    return jax.random.uniform(key, shape, dtype="float32")


def uniform_rows(shape, seeds):
    return jax.vmap(lambda seed: uniform(tuple(shape[1:]), seed))(seeds)


def distribute_tensor(x, layout):
    # A sharding constraint while tracing, a `device_put` otherwise.
    return keras.distribution.distribute_tensor(x, layout)


def to_numpy(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(x, tiled=True)
    return keras.ops.convert_to_numpy(x)


def varying_length(tensors, axis):
    return tensors


def wait(x):
    jax.block_until_ready(x)


def no_grad():
    return contextlib.nullcontext()
