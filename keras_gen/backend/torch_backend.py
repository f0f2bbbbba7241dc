"""The torch backend: a host loop around one `torch.compile`d step.

A data-dependent `while` cannot live inside one torch graph, so the program
runs eagerly and its loop step is compiled once with `fullgraph=True` over
fixed-shape state: the cache is allocated before the loop and updated in
place, and `index` is a tensor, so the step never recompiles as it advances.
"""

import contextlib
import contextvars
import functools
import hashlib
import inspect
import json
import os
import platform
import queue
import sys
import threading
import time
import warnings

import keras
import torch
from keras.src.backend.common import global_state
from torch._inductor.inductor_prims import force_stride_order

from keras_gen import backend

# A `keras.distribution` is refused: see `backend.check_distribution`.
DISTRIBUTED = False

# A loop's step compiles once for caches of every length (the length axis
# symbolic: `varying_length`).
GROWS_CACHES = True

# An Engine keeps one row count: see `backend.compiles_each_shape`.
COMPILES_EACH_SHAPE = True
SHORTEST_CACHE_BUCKET = 64

# Compiled graphs persist in Inductor's caches.
KEEPS_PROGRAMS = True

# The graph compiler behind `torch.compile`: "inductor" (the default, fast
# code), another torch.compile backend such as "aot_eager" (quick to
# compile), or "none" to run the loop step eagerly.
COMPILER = os.environ.get("KERAS_GEN_TORCH_COMPILER", "inductor")


def _settle_keras_scopes():
    """Keras' scopes (device, stateless, symbolic: `fit` enters them) leave
    their global attribute set to None where it was absent. The compiled
    step guards on those attributes and would compile again after the first
    `fit`, or on another thread (Keras keeps them per thread): each program
    sets them before it runs."""
    for name in ("torch_device", "stateless_scope", "symbolic_scope"):
        global_state.set_global_attribute(
            name, global_state.get_global_attribute(name, None)
        )


# Dynamo traces through Keras' `lru_cache`d dtype helpers, which are pure,
# and says so once per helper, with a source line from Keras.
warnings.filterwarnings(
    "ignore", "Dynamo detected a call to a `functools.lru_cache`", UserWarning
)


def use_compilation_cache(path):
    # Inductor's own caches (compiled graphs, autotuning), in keras-gen's
    # folder unless the user points them elsewhere; off with `None`.
    if path is None:
        torch._inductor.config.fx_graph_cache = False
        torch._functorch.config.enable_autograd_cache = False
        return
    from torch._inductor.runtime import cache_dir_utils

    # Importing torch may already have set it, to its default.
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    default = os.path.abspath(cache_dir_utils.default_cache_dir())
    if chosen is None or chosen == default:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    # Inductor keeps no graph that holds a `torch.cond` unless told it may:
    # the sampler's branches made every start compile the step anew (the
    # demo's Engine: 55-60 s a start with the kernels' code cached). A
    # branch is a submodule of the graph, and its code is part of the
    # graph's cache key; the key also names this torch.
    torch._inductor.config.unsafe_marked_cacheable_functions = {
        **torch._inductor.config.unsafe_marked_cacheable_functions,
        "torch.ops.higher_order.cond": f"keras-gen {torch.__version__}",
    }


# Each model, sampler, processor chain and shape bucket compiles its own graph
# of the shared step code; Dynamo's default limit of 8 graphs per code object
# is too few for a process that holds a model or two. (Given to each
# `torch.compile`: Dynamo's global config is per thread, and the Engine
# steps on a thread of its own.)
RECOMPILE_LIMIT = 128
if "recompile_limit" in inspect.signature(torch.compile).parameters:
    _LIMIT = {"recompile_limit": RECOMPILE_LIMIT}
else:  # an older torch: one global config
    _LIMIT = {}
    torch._dynamo.config.cache_size_limit = RECOMPILE_LIMIT


def _counting_compiler(graph_module, example_inputs):
    backend.count_trace()
    compiler = torch._dynamo.lookup_backend(COMPILER)
    return compiler(graph_module, example_inputs)


def _compiled(body):
    # Dynamo keeps compiled graphs on the body's code object, guarded on
    # what the body reads: a new wrapper around a new closure of the same
    # code reuses them.
    return torch.compile(
        body,
        fullgraph=True,
        dynamic=False,
        backend=_counting_compiler,
        **_LIMIT,
    )


# The program now running, as `{"compile": bool}`: whether its loops compile
# their step. `compile_function` sets it; a step that `torch.compile` cannot
# capture turns it off for that program, which then runs eagerly.
_program = {"compile": True}


def _lay_out_kernels(variables):
    # A decode step multiplies a few rows by every kernel. MKL (and
    # oneDNN's int8 product) read a kernel fastest when each output's
    # weights are contiguous: Keras' `(in, out)` kernels are kept as the
    # transposed view of `(out, in)` memory (GPT-2 small, two rows, 2
    # cores: 51.2 -> 41.8 ms per step).
    # Same Parameter objects, shapes and values; later `assign`s copy into
    # this memory.
    for variable in _kernels(variables, torch.int8):
        value = variable.value
        if value.stride() != (1, value.shape[0]):
            value.data = value.data.t().contiguous().t()


def _kernels(variables, *dtypes):
    """The 2-D `kernel` variables: floating ones, and those of `dtypes`."""
    return [
        v
        for v in variables
        if v.path.endswith("kernel")
        and v.value.ndim == 2
        and (v.value.is_floating_point() or v.value.dtype in dtypes)
    ]


def compiling_python():
    # Dynamo folds this to True where it traces; `is_compiling()` is one
    # flag for the process, true on every thread while one compiles (a
    # step that compiles in the background, beside the eager ones).
    return torch.compiler.is_dynamo_compiling()


def compile_function(
    fn, variables, jit_compile=True, static_argnames=(), donate_argnums=()
):
    _lay_out_kernels(variables)
    _choose_forms(variables)
    program = {"compile": jit_compile}

    def call(*args, **kwargs):
        global _program
        backend.check_distribution()
        _settle_keras_scopes()
        outer, _program = _program, program
        try:
            with torch.no_grad(), _eager_while_compiling():
                return fn(*args, **kwargs)
        finally:
            _program = outer

    call.jit_compile = jit_compile
    return call


def while_loop(cond, body, loop_state, jit_compile=True):
    program = _program
    compiled = jit_compile and program["compile"] and COMPILER != "none"
    if compiled and backend.warms_up_in_background() and _lock_fx_patches():
        _compile_in_background(body, program, loop_state)
    elif compiled and backend.is_warming_up() and not bool(cond(loop_state)):
        # The result is dropped; the step's in-place writes (the cache)
        # land on the warm-up's empty state.
        _run(_compiled(body), body, program, loop_state)
    compiled = compiled and program["compile"] and not _eager.active
    step = _compiled(body) if compiled else body
    while bool(cond(loop_state)):
        loop_state, step = _run(step, body, program, loop_state)
    return loop_state


# Compiling in the background (`backend.warming_up(background=True)`): one
# thread compiles every step in turn (a later one of the same graph then
# finds it compiled); only those not yet done are kept. Until none is left,
# every program runs eagerly, whole, under `_fx_patches`: torch.fx's
# tracer (AOTAutograd's `make_fx` among its users) patches
# `torch.nn.Module.__call__` and `__getattr__` for the whole process while
# it traces, and an eager step on another thread would call its layers
# through the tracer. The compiling thread holds the lock while those
# patches stand. (The eager programs call no compiled step, so they never
# wait for Dynamo's lock while holding this one.)
_compiling = []  # an entry per step queued or compiling
_jobs = queue.SimpleQueue()
_compiler = []  # the compiling thread, once started
_settings = []  # the settings to restore once none is left
_background = threading.Lock()  # for the three above
SWITCH_INTERVAL = 1e-3
_fx_patches = threading.RLock()


class _Eager(threading.local):
    active = False  # this thread runs a program eagerly, under `_fx_patches`


_eager = _Eager()


@contextlib.contextmanager
def _eager_while_compiling():
    # (A background warm-up's programs too: they start the compiles.)
    background = _compiling or backend.warms_up_in_background()
    if not background or _eager.active:
        yield
        return
    with _fx_patches:
        _eager.active = True
        try:
            yield
        finally:
            _eager.active = False


def _lock_fx_patches():
    """Make torch.fx's tracer hold `_fx_patches` while its patches stand
    (once; whether torch has the function this wraps)."""
    new_patcher = getattr(torch.fx._symbolic_trace, "_new_patcher", None)
    if new_patcher is None or getattr(new_patcher, "locked", False):
        return new_patcher is not None

    @contextlib.contextmanager
    def locked():
        with _fx_patches, new_patcher() as patcher:
            yield patcher

    locked.locked = True
    torch.fx._symbolic_trace._new_patcher = locked
    return True


def background_compiles():
    return len(_compiling)


def _compile_in_background(body, program, loop_state):
    """Compile `body`'s step for `loop_state` on the compiling thread: it
    runs the step once, with this thread's Keras scopes, and drops the
    result. The step writes in place only the loop's `state` (the
    key/value cache), so that alone is copied (same shapes, strides and
    symbolic axes); the rest is shared, as the step's guards expect (the
    sampler's numbers are both its own and the loop's)."""
    copies = {}

    def copy(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in copies:  # an input given twice stays one tensor
            copies[id(x)] = torch.empty_strided(
                x.shape, x.stride(), dtype=x.dtype, device=x.device
            ).copy_(x)
            dynamic = getattr(x, "_dynamo_dynamic_indices", ())
            if dynamic:
                torch._dynamo.mark_dynamic(copies[id(x)], sorted(dynamic))
        return copies[id(x)]

    state = loop_state._replace(
        state=torch.utils._pytree.tree_map(copy, loop_state.state)
    )
    scopes = dict(vars(global_state.GLOBAL_STATE_TRACKER))

    def compile():
        for name, value in scopes.items():
            global_state.set_global_attribute(name, value)
        with torch.no_grad():
            try:
                _compiled(body)(state)
            except Exception as error:  # the program stays eager
                program["compile"] = False
                warnings.warn(
                    "torch.compile cannot capture this generation step, so "
                    f"it runs eagerly: {str(error).splitlines()[0]}"
                )

    # The compiler's processes take the cores: two threads of an eager
    # step would wait on each other at every product. And the eager step
    # takes the GIL back after each of its many small ops: a shorter
    # switch interval lets it in sooner while the compiling thread runs
    # Python. torch's compiler settings are context variables (the
    # compilation cache's among them): the compiling thread runs in a copy
    # of this thread's context. It is a daemon: a process that exits does
    # not wait for a compile.
    with _background:
        if not _compiling:
            _settings[:] = [(torch.get_num_threads(), sys.getswitchinterval())]
            torch.set_num_threads(1)
            sys.setswitchinterval(SWITCH_INTERVAL)
        _compiling.append(body)
        _jobs.put(functools.partial(contextvars.copy_context().run, compile))
        if not _compiler:
            _compiler.append(
                threading.Thread(
                    target=_compile_jobs, name="keras-gen-compile", daemon=True
                )
            )
            _compiler[0].start()


def _compile_jobs():
    while True:
        job = _jobs.get()
        try:
            job()
        finally:
            with _background:
                _compiling.pop()
                if not _compiling:
                    threads, interval = _settings.pop()
                    torch.set_num_threads(threads)
                    sys.setswitchinterval(interval)


def _run(step, body, program, loop_state):
    """One step: the new loop state and the step to run next (the eager
    body once the compiled step turned out impossible)."""
    try:
        return step(loop_state), step
    except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as error:
        # Dynamo fails while tracing, before the step has run (a Python
        # branch on a tensor is a `UserError`).
        if step is body:
            raise
        warnings.warn(
            "torch.compile cannot capture this generation step, so it "
            f"runs eagerly: {str(error).splitlines()[0]}"
        )
        program["compile"] = False
        return body(loop_state), body


# Dynamo traced GPT-2 small's step in 19.7 s, most of it the Python of its
# 12 blocks' Keras layers; tracing one block and stamping it out for the
# other 11 takes a fifth of that, in every process (Dynamo's traces are not
# cached). Dynamo reuses a traced block only where the block reads the
# same attributes and weights of the same shapes, and takes no output that
# is an input: the region returns the block's outputs only, its cache
# written in place.
@torch.compiler.nested_compile_region
def _block_region(block, x, cache, index):
    return block(x, cache=cache, index=index)[0]


def call_block(block, x, cache, index):
    keys, values = cache[0], cache[1]
    if not compiling_python() or not (
        _in_place(keys, True) and _in_place(values, True)
    ):
        return block(x, cache=cache, index=index)
    return _block_region(block, x, cache, index), cache


def cond(pred, true_fn, false_fn, *operands):
    # A Python branch on a tensor would break a `fullgraph` compile.
    if compiling_python():
        operands = torch.utils._pytree.tree_map(_row_major, operands)
        return torch.cond(pred, _fresh(true_fn), _fresh(false_fn), operands)
    return (true_fn if bool(pred) else false_fn)(*operands)


def _row_major(x):
    """`x` laid out row-major in the compiled program. Inductor compiles a
    `torch.cond` branch for row-major inputs but may hand it another
    layout (GPT-2's logits as the transpose of a `(50257, rows)` product),
    and the branch then fails on its input's strides; Inductor's own
    stride constraint copies only such an input."""
    if not isinstance(x, torch.Tensor) or x.ndim < 2:
        return x
    if not x.is_contiguous():  # a broadcast one: its own copy
        x = x.clone(memory_format=torch.contiguous_format)
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.insert(0, step)
        step *= size
    return force_stride_order(x, strides)


def _fresh(branch):
    """`branch` returning new contiguous tensors: `torch.cond`'s branches
    may not return their inputs and must agree on strides."""

    def fresh(*operands):
        return torch.utils._pytree.tree_map(
            lambda x: x.clone(memory_format=torch.contiguous_format),
            branch(*operands),
        )

    return fresh


# Index tensors, not Python slices: a slice with a tensor bound is a
# data-dependent shape that breaks a `fullgraph` compile.
def _positions(x, start, length):
    start = torch.as_tensor(start, device=x.device)
    return start + torch.arange(length, device=x.device)


def slice(x, start, length, axis):
    return torch.index_select(x, axis, _positions(x, start, length))


# A donated `x` is written in place: copying a whole cache to change one
# position would cost more than the step's attention. Inside a compiled step
# this is a mutation of the step's input, which `torch.compile` supports.
# A broadcast view (`ops.repeat` of one row) shares memory between rows and
# is copied by its first write.
def _in_place(x, donate):
    return donate and x.is_contiguous()


def update_slice(x, update, start, axis, donate=False):
    positions = _positions(x, start, update.shape[axis])
    copy = x.index_copy_ if _in_place(x, donate) else x.index_copy
    return copy(axis, positions, update.to(x.dtype))


def update_rows(x, update, starts, axis, donate=False):
    # Advanced indexing over axes 0..axis; the index tensors broadcast to
    # `update.shape[:axis + 1]`.
    starts = torch.as_tensor(starts, device=x.device).to(torch.int64)
    indices = []
    for dim in range(axis + 1):
        shape = [1] * (axis + 1)
        shape[dim] = update.shape[dim]
        index = torch.arange(update.shape[dim], device=x.device).reshape(shape)
        if dim == axis:
            index = index + starts.reshape([-1] + [1] * axis)
        indices.append(index)
    put = x.index_put_ if _in_place(x, donate) else x.index_put
    return put(tuple(indices), update.to(x.dtype))


def update_block(x, update, starts, donate=False):
    target = x if _in_place(x, donate) else x.clone()
    block = target
    for axis, (start, size) in enumerate(zip(starts, update.shape)):
        block = block.narrow(axis, int(start), size)
    block.copy_(update.to(x.dtype))
    return target


# How a product of some rows by `(out, in)` weights runs fastest depends on
# the CPU and the number of rows. On an Intel Xeon MKL's `x @ w.T`
# (`linear`) won for up to 3 rows (GPT-2's 50257 x 768 table, 2 rows, 2
# cores: 9.7 ms against 19.6 as `(w @ x.T).T`), `(w @ x.T).T` (`product`)
# beyond. On an AMD EPYC MKL's `product` wins at 2 to 4 rows (GPT-2 small's
# kernels and table, 2 rows: 17.4 ms against 65.6 as `linear`), while for
# one row and for 5 rows or more oneDNN's product (`onednn`) does (1 row:
# 20.9 against 35.4; 8 rows: 30.8 against 49.2; 512 rows: 676 against 731).
# `_choose_forms` times each form on the model's own kernels before its
# first step compiles, for each class of row counts (1, 2-3, 4-7 and 8 or
# more rows, timed at its smallest), once per process, or reads the forms a
# process timed before on this machine.
_ROW_CLASSES = (1, 2, 4, 8)
_FORMS = {1: "linear", 2: "linear", 4: "product", 8: "product"}

# Kernels that fit in a CPU's caches say nothing about reading them from
# memory: smaller models keep the default forms.
_TIMED_BYTES = 64 << 20


# `x @ w.T` by oneDNN's inner product, on the weights as they lie. An op of
# keras-gen's own: Inductor's lowering of oneDNN's op takes only weights
# it packed itself. Defined through `torch.library.Library` rather than
# `custom_op`, whose wrapper cost 34 us a call against 22 (49 calls a GPT-2
# step). It has no gradient.
_LIBRARY = torch.library.Library("keras_gen", "DEF")
_LIBRARY.define("onednn_linear(Tensor x, Tensor w) -> Tensor")
_LIBRARY.impl(
    "onednn_linear",
    lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""),
    "CPU",
)


@torch.library.register_fake("keras_gen::onednn_linear")
def _(x, w):
    return x.new_empty((x.shape[0], w.shape[0]))


def _product(form, rows, y):
    if form == "linear":
        return torch.nn.functional.linear(rows, y)
    if form == "onednn":
        return torch.ops.keras_gen.onednn_linear(rows, y)
    # Made row-major: inductor lays a transposed product out as it likes,
    # and a `torch.cond` branch that reads it (lifted from its closure)
    # asserted another layout (4 rows and more).
    return (y @ rows.t()).t().contiguous()


def _choose_forms(variables):
    if "timed" in _FORMS:
        return
    _FORMS["timed"] = True
    kernels = [v.value.data.t() for v in _kernels(variables)]
    if sum(k.numel() * k.element_size() for k in kernels) < _TIMED_BYTES:
        return
    width = kernels[0].shape[1]
    kernels = [kernel for kernel in kernels if kernel.shape[1] == width]
    key = _forms_key(kernels)
    chosen = _chosen_forms().get(key)
    if chosen is None:
        chosen = _time_forms(kernels)
        _remember_forms(key, chosen)
    _FORMS.update(chosen)


def _time_forms(kernels):
    forms = ["linear", "product"]
    if kernels[0].is_cpu and torch.backends.mkldnn.is_available():
        forms.append("onednn")
    chosen = {}
    with torch.no_grad():
        for count in _ROW_CLASSES:
            rows = torch.ones((count, kernels[0].shape[1]), dtype=kernels[0].dtype)
            # Alternating rounds, the fastest of each form: the first pass
            # over fresh memory, or a busy moment, weighs on every form.
            # Five: the choice is kept for later processes.
            times = {form: [] for form in forms}
            for _ in range(5):
                for form in forms:
                    start = time.perf_counter()
                    for kernel in kernels:
                        _product(form, rows, kernel)
                    times[form].append(time.perf_counter() - start)
            chosen[count] = min(forms, key=lambda form: min(times[form]))
    return chosen


# The forms chosen are kept in the compilation cache's folder, by machine,
# torch, threads and kernels: a later process skips the timing (GPT-2
# small: 2.9 s), and compiles the step it compiled before, which Inductor's
# cache then holds (a choice timed anew on a busy machine may differ, and
# a step of other forms compiles again). At most `_KEPT_FORMS` entries;
# delete the file to time them again.
_FORMS_FILE = "product_forms.json"
_KEPT_FORMS = 64


def _forms_key(kernels):
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    shapes = sorted(tuple(k.shape) for k in kernels)
    described = [cpu.strip(), torch.__version__, torch.get_num_threads()]
    described += [str(kernels[0].dtype), kernels[0].device.type, shapes]
    return hashlib.sha256(repr(described).encode()).hexdigest()[:32]


def _forms_path():
    folder = backend.compilation_cache_dir()
    return None if folder is None else os.path.join(folder, _FORMS_FILE)


def _chosen_forms():
    path = _forms_path()
    if path is None:
        return {}
    try:
        with open(path) as file:
            entries = json.load(file)
        return {
            key: {int(count): form for count, form in forms.items()}
            for key, forms in entries.items()
            if set(forms.values()) <= {"linear", "product", "onednn"}
            and {int(count) for count in forms} == set(_ROW_CLASSES)
        }
    except (TypeError, OSError, ValueError, AttributeError):
        return {}  # none yet, or a file this code did not write


def _remember_forms(key, chosen):
    path = _forms_path()
    if path is None:
        return
    entries = {k: v for k, v in _chosen_forms().items() if k != key}
    entries = dict(list(entries.items())[-(_KEPT_FORMS - 1) :])
    entries[key] = chosen
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "w") as file:
            json.dump(entries, file)
        os.replace(temporary, path)  # whole, for a process reading it now
    except OSError:
        pass  # a read-only cache: the next process times them again


def matmul(x, kernel):
    # `kernel` is `(in, out)`: the transposed view of `(out, in)` memory
    # (`_lay_out_kernels`).
    return matmul_transposed(x, kernel.t())


def matmul_transposed(x, y):
    rows = x.reshape(-1, x.shape[-1])
    count = max(c for c in _ROW_CLASSES if c <= max(rows.shape[0], 1))
    form = _FORMS[count]
    if form == "onednn" and (
        torch.is_grad_enabled() or rows.dtype != y.dtype or not rows.is_cpu
    ):
        form = "product"  # oneDNN's op here has no gradient, and runs on CPU
    product = _product(form, rows, y)
    return product.reshape(*x.shape[:-1], y.shape[0])


def int8_matmul(x, kernel, kernel_scale, quantize_inputs, transpose):
    rows = x.reshape(-1, x.shape[-1])
    weight = kernel.t() if transpose else kernel
    scale = kernel_scale.to(torch.float32)
    if quantize_inputs:
        # int8 products, int32 sums. How fast depends on the machine: 7.5
        # ms for 40 of GPT-2 small's 768 x 3072 kernels at two rows against
        # 54 in float32 on one; on an AMD EPYC with torch 2.13, 3.7 ms for
        # one against 0.5 (see docs/checkpoints.md).
        quantized, row_scale = backend.quantize_rows(rows)
        product = torch._int_mm(quantized, weight).to(torch.float32)
        product = product / (row_scale * scale)
    else:
        product = rows @ weight.to(rows.dtype) / scale.to(rows.dtype)
    return product.to(x.dtype).reshape(*x.shape[:-1], weight.shape[1])


def count_tokens(token_ids, weights, vocabulary_size):
    token_ids = torch.as_tensor(token_ids).to(torch.int64)
    weights = torch.as_tensor(weights, device=token_ids.device).to(torch.float32)
    valid = (token_ids >= 0) & (token_ids < vocabulary_size)
    counts = torch.zeros((token_ids.shape[0], vocabulary_size), device=token_ids.device)
    return counts.scatter_add(
        1, torch.where(valid, token_ids, 0), torch.where(valid, weights, 0.0)
    )


_MASK = 0xFFFFFFFF


def _mix(x):
    # The 32-bit finaliser of MurmurHash3, computed in int64 so that every
    # product keeps its low 32 bits exactly.
    x = x & _MASK
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B) & _MASK
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35) & _MASK
    return x ^ (x >> 16)


def uniform(shape, seed):
    # A counter-based generator: a hash of (seed, position). It is stateless,
    # so it compiles into the step and gives the same numbers for the same
    # seed, eager or compiled.
    return uniform_rows((1, *shape), torch.as_tensor(seed)[None])[0]


def uniform_rows(shape, seeds):
    seeds = torch.as_tensor(seeds).to(torch.int64)
    count = 1
    for dim in shape[1:]:
        count *= int(dim)
    counter = torch.arange(count, dtype=torch.int64, device=seeds.device)[None]
    key = _mix(_mix(seeds[:, :1] + 0x9E3779B9) ^ seeds[:, 1:])  # (rows, 1)
    bits = _mix(_mix(counter ^ key) + key)
    return ((bits >> 8).to(torch.float32) * (1.0 / (1 << 24))).reshape(shape)


def distribute_tensor(x, layout):
    return x


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def varying_length(tensors, axis):
    # Dynamo compiles the step with that axis symbolic: one graph for every
    # length (the others stay static).
    for x in torch.utils._pytree.tree_leaves(tensors):
        if isinstance(x, torch.Tensor):
            torch._dynamo.mark_dynamic(x, axis)
    return tensors


def wait(x):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def no_grad():
    return torch.no_grad()
