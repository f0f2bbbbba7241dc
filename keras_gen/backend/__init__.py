"""Everything that differs per Keras backend lives in this package.

The rest of keras-gen is written with `keras.ops`. It calls the few functions
here where the backends really differ: how a generation program is compiled,
how its loop runs, and where its random numbers come from. Only the module of
the active backend is imported, so `import keras_gen` never pulls in
TensorFlow or torch unless Keras runs on them.
"""

import contextlib
import importlib
import os
import threading

import keras
import numpy as np

from keras_gen.utils import backend_choice

_MODULES = {
    "jax": "keras_gen.backend.jax_backend",
    "tensorflow": "keras_gen.backend.tensorflow_backend",
    "torch": "keras_gen.backend.torch_backend",
}

_trace_counter = [0]
_thread_traces = threading.local()


def name():
    """The active Keras backend: `"jax"`, `"tensorflow"` or `"torch"`."""
    return keras.config.backend()


if name() not in _MODULES:
    raise RuntimeError(
        f"keras-gen runs on the Keras backends {sorted(_MODULES)}; "
        f"the active backend is {name()!r}. Set KERAS_BACKEND."
    )
# Keras fixes its backend when it is imported, so the module is chosen once.
_impl = importlib.import_module(_MODULES[name()])
backend_choice.announce(name())


def compilation_cache_dir():
    """Where compiled programs persist between processes, or `None` (off,
    or a backend that keeps none: TensorFlow).

    `KERAS_GEN_COMPILATION_CACHE`: unset, a `keras-gen/compilation` folder
    in the user's cache (`$XDG_CACHE_HOME`, else `~/.cache`); `0` (or
    `off`, `false`) turns the cache off; anything else is the folder.
    Each backend keeps its programs in a subfolder of its name.
    """
    setting = os.environ.get("KERAS_GEN_COMPILATION_CACHE", "")
    if not _impl.KEEPS_PROGRAMS or setting.lower() in ("0", "off", "false", "no"):
        return None
    if not setting:
        root = os.environ.get("XDG_CACHE_HOME") or os.path.join(
            os.path.expanduser("~"), ".cache"
        )
        setting = os.path.join(root, "keras-gen", "compilation")
    return os.path.join(setting, name())


# JAX: its persistent compilation cache; torch: inductor's caches;
# TensorFlow keeps none.
_impl.use_compilation_cache(compilation_cache_dir())


def trace_count(this_thread=False):
    """How many times a generation program has been traced (compiled), in
    this process or (`this_thread=True`) on this thread.

    Tests read it before and after a call to prove that a call reused a
    compiled program instead of building a new one.
    """
    if this_thread:
        return getattr(_thread_traces, "count", 0)
    return _trace_counter[0]


def count_trace():
    _trace_counter[0] += 1
    _thread_traces.count = trace_count(this_thread=True) + 1


def compiling_python():
    """Whether a compiler is tracing Python bytecode now (torch.compile's
    Dynamo, inside a generation step). Layers then skip what of Keras'
    call machinery generation does not need (`layers.LeanCall`)."""
    return _impl.compiling_python()


def compile_function(
    fn, variables, jit_compile=True, static_argnames=(), donate_argnums=()
):
    """Compile `fn`, which reads the Keras `variables`, into one program.

    JAX: `jax.jit`, with the variables passed in explicitly. TensorFlow:
    `tf.function(jit_compile=True)`. torch: `fn` runs eagerly and its loops
    compile their step (see `while_loop`). Arguments named in
    `static_argnames` are Python values that select a program. At most one
    positional argument, named in `donate_argnums`, is handed over: `fn`
    returns its new value, in the same structure, and the old one is not
    read again (a stream's loop state). JAX reuses its buffers; TensorFlow
    keeps it in `tf.Variable`s that the program updates in place.
    """
    return _impl.compile_function(
        fn,
        variables,
        jit_compile=jit_compile,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
    )


def while_loop(cond, body, loop_state, jit_compile=True):
    """Run `loop_state = body(loop_state)` while `cond(loop_state)`.

    `loop_state` is a nested structure of tensors whose shapes never change.
    On JAX and TensorFlow this becomes a loop inside the compiled program; on
    torch it is a host loop around one compiled step.
    """
    return _impl.while_loop(cond, body, loop_state, jit_compile=jit_compile)


# Per thread: a warm-up on the Engine's step thread leaves other threads'
# calls as they are.
_warming = threading.local()


@contextlib.contextmanager
def warming_up(background=False):
    """Within it, programs compile every step they may run, even a loop
    whose condition is false at once (a warm-up runs its programs on empty
    state). torch compiles a loop's step when it first runs: it then runs
    the step once and drops the result, so the step's in-place writes (the
    key/value cache) must be harmless, as they are on empty state. JAX and
    TensorFlow compile the whole program anyway.

    `background=True` (torch): the steps compile in turn on one thread of
    their own, each run on a copy of its loop's cache; until none is left,
    every program runs eagerly (see `background_compiles`). JAX and TensorFlow
    compile whole programs and ignore it."""
    outer = is_warming_up(), warms_up_in_background()
    _warming.active, _warming.background = True, background
    try:
        yield
    finally:
        _warming.active, _warming.background = outer


def is_warming_up():
    """Whether this thread's calls now run inside `warming_up()`."""
    return getattr(_warming, "active", False)


def warms_up_in_background():
    """Whether this thread's calls run inside `warming_up(background=True)`."""
    return getattr(_warming, "background", False)


def background_compiles():
    """How many steps `warming_up(background=True)` left compiling (or
    waiting to) in this process."""
    return _impl.background_compiles()


def grows_caches():
    """Whether one program may run its loop in segments over caches of
    growing length (each segment a loop of its own shapes).

    JAX and TensorFlow compile every segment into the same XLA program;
    torch compiles its loop step once for them all, the caches' length
    symbolic (see `varying_length`).
    """
    return _impl.GROWS_CACHES


def compiles_each_shape():
    """Whether each shape an Engine program runs at is a compile of its
    own worth avoiding: torch compiles a decode step in about a minute, so
    its Engine runs every slot in each decode program (a few rows cost
    hardly more than one) and its length buckets share one compiled step
    (`varying_length`)."""
    return _impl.COMPILES_EACH_SHAPE


def varying_length(tensors, axis):
    """`tensors` (a structure), their `axis` a length that changes between
    the calls of a compiled loop step (a cache grown in segments): torch
    compiles one step for every length instead of one per length; as is
    elsewhere. Call it outside the step."""
    return _impl.varying_length(tensors, axis)


def shortest_cache_bucket():
    """The shortest cache span an Engine's decode program attends over.

    Below it attention is a small share of a step, while each length
    bucket is a compile per row bucket at warm-up. TensorFlow compiles
    slowest, so it starts at 128 positions (the demo's Engine: 22 programs
    and 47-56 s to warm up against 28 and 67-69 s from 64, short requests
    as fast; 4 requests of 100 tokens 854 / 1,288 ms against 738 / 710);
    JAX at 64.
    """
    return _impl.SHORTEST_CACHE_BUCKET


def call_block(block, x, cache, index):
    """`block(x, cache=cache, index=index)`: one of a model's repeated
    blocks, `(x, cache)` back.

    torch: inside a compiled step, Dynamo traces the first block of each
    structure and stamps its graph out for the others (a nested compile
    region; a block that reads other attributes or weights of other
    shapes is traced anew). Its cache is written in place. JAX and
    TensorFlow: the plain call.
    """
    return _impl.call_block(block, x, cache, index)


def cond(pred, true_fn, false_fn, *operands):
    """`true_fn(*operands)` if the scalar bool `pred` holds, else `false_fn`.

    Inside a compiled program only the branch taken runs (its cost is
    skipped, not masked). Both branches return tensors of the same
    structure, shapes and dtypes.
    """
    return _impl.cond(pred, true_fn, false_fn, *operands)


def slice(x, start, length, axis):
    """`length` entries of `x` along `axis` from `start`, a scalar tensor."""
    return _impl.slice(x, start, length, axis)


def update_slice(x, update, start, axis, donate=False):
    """`x` with `update` written along `axis` from `start`, a scalar tensor.

    `donate=True` promises that `x` is not read again, so that the write
    may happen in place: torch then writes into `x` instead of copying it
    (a key/value cache is rewritten every step). XLA already updates loop
    buffers in place, so JAX and TensorFlow ignore it.
    """
    return _impl.update_slice(x, update, start, axis, donate=donate)


def update_rows(x, update, starts, axis, donate=False):
    """`x` with row `b` of `update` written along `axis` from `starts[b]`.

    The per-row form of `update_slice`: `starts` is a `(batch,)` int
    tensor, so that each row of a batch can write at its own position
    (speculative decoding advances rows by different counts). `x` may have
    more rows than `update`: its first rows are written (the serving
    engine's occupied slots). Every write must lie inside `x`. `donate` as
    in `update_slice`.
    """
    return _impl.update_rows(x, update, starts, axis, donate=donate)


def update_block(x, update, starts, donate=False):
    """`x` with the block `update` written at `starts`, one scalar tensor
    per axis (the engine seeds one slot's cache rows this way). `donate` as
    in `update_slice`."""
    return _impl.update_block(x, update, starts, donate=donate)


def matmul(x, kernel):
    """`x @ kernel` for a `(in, out)` float kernel (a `Dense` layer's).

    torch multiplies its `(out, in)` memory (see `matmul_transposed`).
    """
    if hasattr(_impl, "matmul"):
        return _impl.matmul(x, keras.ops.convert_to_tensor(kernel))
    return keras.ops.matmul(x, kernel)


def matmul_transposed(x, y):
    """`x @ y.T`: `(..., n)` against every row of a `(m, n)` matrix `y`.

    How an embedding table serves as the output head. torch picks the
    product its BLAS runs fastest for the row count on this machine (see
    its module); XLA chooses its own layouts.
    """
    if hasattr(_impl, "matmul_transposed"):
        return _impl.matmul_transposed(x, y)
    return keras.ops.matmul(x, keras.ops.transpose(y))


def int8_matmul(x, kernel, kernel_scale, quantize_inputs=True, transpose=False):
    """`x @ kernel` for an int8 `kernel` with one scale per output, in
    Keras' convention (the float weights are `kernel / kernel_scale`).

    `quantize_inputs`: each row of `x` is quantized to int8 on the fly (its
    absolute maximum maps to 127) and the product runs on int8 with int32
    sums (XLA's int8 dot; torch's `_int_mm`), as CPU engines' int8 does.
    Otherwise `kernel` is cast to `x`'s dtype (weight-only int8).
    `transpose`: `kernel` is `(out, in)`, an int8 embedding table used as
    the output head. Returns float in `x`'s dtype.
    """
    ops = keras.ops
    kernel = ops.convert_to_tensor(kernel)
    kernel_scale = ops.convert_to_tensor(kernel_scale)
    if hasattr(_impl, "int8_matmul"):
        return _impl.int8_matmul(x, kernel, kernel_scale, quantize_inputs, transpose)
    # XLA (jax, tensorflow): an einsum contracts the table's rows where
    # they lie (a transpose before an int8 dot is copied: GPT-2's 50257 x
    # 768 table, two rows, 81 ms against 5 in float32).
    equation = "...i,oi->...o" if transpose else "...i,io->...o"
    if quantize_inputs:
        rows, scale = quantize_rows(x)
        product = ops.cast(ops.einsum(equation, rows, kernel), "float32")
        product = product / (scale * ops.cast(kernel_scale, "float32"))
    else:
        product = ops.einsum(equation, x, ops.cast(kernel, x.dtype))
        product = product / ops.cast(kernel_scale, product.dtype)
    return ops.cast(product, x.dtype)


def quantize_rows(x):
    """`x` as int8 rows and their `(..., 1)` float32 scales: `x * scale`
    rounded, each row's absolute maximum mapped to 127 (Keras' absmax
    scheme, with its epsilon, so an all-zero row stays zero)."""
    ops = keras.ops
    x = ops.cast(x, "float32")
    scale = 127.0 / (
        ops.amax(ops.abs(x), axis=-1, keepdims=True) + keras.config.epsilon()
    )
    rows = ops.clip(ops.round(x * scale), -127, 127)
    return ops.cast(rows, "int8"), scale


def count_tokens(token_ids, weights, vocabulary_size):
    """`(batch, vocabulary_size)` sums of `weights` per token id, row by row.

    `token_ids` and `weights` are `(batch, length)`; ids outside
    `[0, vocabulary_size)` (such as `-1` padding) are ignored. A scatter-add:
    no `(batch, length, vocabulary_size)` one-hot tensor is built.
    """
    return _impl.count_tokens(token_ids, weights, vocabulary_size)


def uniform(shape, seed):
    """Uniform floats in [0, 1) drawn from an explicit int32 seed.

    `seed` is `(2,)`: one draw of the whole `shape`. Or `(shape[0], 2)`:
    row `b` is drawn from `seed[b]` alone, so a row's numbers do not depend
    on the other rows (or on how many there are).
    """
    if len(keras.ops.shape(seed)) == 2:
        return _impl.uniform_rows(shape, seed)
    return _impl.uniform(shape, seed)


def distribute_tensor(x, layout):
    """`x` laid out across devices as `layout` (a `keras.distribution.TensorLayout`).

    JAX: inside a compiled program a sharding constraint
    (`jax.lax.with_sharding_constraint`) that XLA's partitioner honours;
    outside one, the value moved onto the layout's devices. Other backends
    run on one device (see `check_distribution`) and return `x` unchanged.
    `layout=None` leaves `x` as it is on every backend.
    """
    if layout is None:
        return x
    return _impl.distribute_tensor(x, layout)


def check_distribution():
    """Raise if a `keras.distribution` is set that this backend cannot honour.

    Sharded generation runs on JAX only: there the compiled program is
    partitioned by XLA across the distribution's device mesh. TensorFlow and
    torch would silently run on one device, so they refuse instead.
    """
    distribution = keras.distribution.distribution()
    if distribution is not None and not _impl.DISTRIBUTED:
        raise RuntimeError(
            "keras-gen generates across devices on the JAX backend only, but "
            f"a keras.distribution is set ({distribution}) and the active "
            f"backend is {name()!r}. Set KERAS_BACKEND=jax to shard "
            "generation, or call keras.distribution.set_distribution(None) "
            "to generate on one device."
        )


def to_numpy(x):
    """A program output as a NumPy array on this host.

    JAX with several processes: an array sharded over other hosts' devices
    is gathered from all of them (every process calls this, in the same
    order, as every process runs the same program).
    """
    return np.asarray(_impl.to_numpy(x))


def wait(x):
    """Wait until the program that made `x` (a tensor or a structure of
    them) has finished: how long a program runs, not how long it took to
    dispatch, when timing it."""
    _impl.wait(x)


def no_grad():
    """A context in which no gradients are recorded (a no-op but on torch)."""
    return _impl.no_grad()
