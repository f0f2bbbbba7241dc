"""The TensorFlow backend: `tf.function(jit_compile=True)`."""

import contextlib

import keras
import tensorflow as tf
from tensorflow.compiler.tf2xla.python.xla import dynamic_update_slice

from keras_gen import backend

# A `keras.distribution` is refused: see `backend.check_distribution`.
DISTRIBUTED = False

# A program's loops may run over caches of growing length, all compiled
# into the one program (see `backend.grows_caches`).
GROWS_CACHES = True

# An Engine compiles a program per row and length bucket.
COMPILES_EACH_SHAPE = False

# Its compiles are the slowest: see `backend.shortest_cache_bucket`.
SHORTEST_CACHE_BUCKET = 128

# TensorFlow keeps no compiled XLA program between processes.
KEEPS_PROGRAMS = False


def use_compilation_cache(path):
    del path  # (always None: see KEEPS_PROGRAMS)


def _as_variable(x):
    return x if isinstance(x, tf.Variable) else tf.Variable(x, trainable=False)


def _assigning(fn, donated):
    # A donated argument lives in `tf.Variable`s and the program assigns its
    # new value to them: XLA updates a variable in place, while a tensor
    # argument is copied into the program's buffers on every call (a stream
    # chunk would copy the whole cache).
    def assigning_fn(*args, **kwargs):
        values = list(args)
        values[donated] = tf.nest.map_structure(lambda v: v.read_value(), args[donated])
        result = fn(*values, **kwargs)
        tf.nest.map_structure(lambda v, x: v.assign(x), args[donated], result)

    return assigning_fn


def background_compiles():
    return 0  # a whole program compiles where it is first called


def compiling_python():
    # `tf.function` traces by running the Python: Keras' calls cost little.
    return False


def compile_function(
    fn, variables, jit_compile=True, static_argnames=(), donate_argnums=()
):
    donated = donate_argnums[0] if donate_argnums else None
    body = fn if donated is None else _assigning(fn, donated)

    # tf.function reads the variables by reference and treats Python values
    # (the static arguments) as part of the program's signature.
    def traced_fn(*args, **kwargs):
        backend.count_trace()
        return body(*args, **kwargs)

    function = tf.function(traced_fn, jit_compile=jit_compile, autograph=False)

    def call(*args, **kwargs):
        backend.check_distribution()
        if donated is None:
            return function(*args, **kwargs)
        args = list(args)
        args[donated] = tf.nest.map_structure(_as_variable, args[donated])
        function(*args, **kwargs)
        return args[donated]

    return call


def while_loop(cond, body, loop_state, jit_compile=True):
    def tf_body(state):
        return (body(state),)

    # tf.while_loop wants the body to return the same structure it got.
    (loop_state,) = tf.while_loop(lambda state: cond(state), tf_body, (loop_state,))
    return loop_state


def _starts(x, start, axis):
    zero = tf.zeros((), "int32")
    starts = [zero] * len(x.shape)
    starts[axis] = tf.cast(start, "int32")
    return tf.stack(starts)


def call_block(block, x, cache, index):
    return block(x, cache=cache, index=index)


def cond(pred, true_fn, false_fn, *operands):
    return tf.cond(pred, lambda: true_fn(*operands), lambda: false_fn(*operands))


def slice(x, start, length, axis):
    sizes = [-1] * len(x.shape)
    sizes[axis] = length
    return tf.slice(x, _starts(x, start, axis), sizes)


def update_slice(x, update, start, axis, donate=False):
    return dynamic_update_slice(x, tf.cast(update, x.dtype), _starts(x, start, axis))


def update_rows(x, update, starts, axis, donate=False):
    # A scatter of whole trailing slices: indices `(*update.shape[:axis + 1],
    # axis + 1)` name the batch row, the leading axes and the position.
    shape = tf.shape(update)[: axis + 1]
    grids = []
    for dim in range(axis + 1):
        size = tf.shape(update)[dim]
        ones = [1] * (axis + 1)
        ones[dim] = -1
        grid = tf.reshape(tf.range(size), ones)
        if dim == axis:
            starts_shape = [-1] + [1] * axis
            grid = grid + tf.reshape(tf.cast(starts, "int32"), starts_shape)
        grids.append(tf.broadcast_to(grid, shape))
    indices = tf.stack(grids, axis=-1)
    return tf.tensor_scatter_nd_update(x, indices, tf.cast(update, x.dtype))


def update_block(x, update, starts, donate=False):
    starts = tf.stack([tf.cast(s, "int32") for s in starts])
    return dynamic_update_slice(x, tf.cast(update, x.dtype), starts)


def count_tokens(token_ids, weights, vocabulary_size):
    token_ids = tf.cast(token_ids, "int32")
    weights = tf.cast(weights, "float32")
    valid = (token_ids >= 0) & (token_ids < vocabulary_size)
    rows = tf.broadcast_to(
        tf.range(tf.shape(token_ids)[0])[:, None], tf.shape(token_ids)
    )
    indices = tf.stack([rows, tf.where(valid, token_ids, 0)], axis=-1)
    return tf.scatter_nd(
        indices,
        tf.where(valid, weights, 0.0),
        tf.stack([tf.shape(token_ids)[0], vocabulary_size]),
    )


def uniform(shape, seed):
    return tf.random.stateless_uniform(
        shape, seed=tf.cast(seed, "int32"), dtype="float32"
    )


def uniform_rows(shape, seeds):
    # One draw per row, in a loop of the graph: unrolled, thousands of rows
    # (speculative sampling tests draw for 3,000) made a graph that XLA
    # could not compile within the machine's memory.
    return tf.map_fn(
        lambda seed: uniform(shape[1:], seed),
        tf.cast(seeds, "int32"),
        fn_output_signature=tf.float32,
    )


def distribute_tensor(x, layout):
    return x


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def varying_length(tensors, axis):
    return tensors


def wait(x):
    tf.test.experimental.sync_devices()


def no_grad():
    return contextlib.nullcontext()
