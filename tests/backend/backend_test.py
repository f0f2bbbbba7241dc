import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from keras_gen import backend


def test_uniform_is_deterministic_in_range_and_seed_dependent():
    draw = lambda seed: ops.convert_to_numpy(  # noqa: E731
        backend.uniform((4, 1000), ops.convert_to_tensor(seed, "int32"))
    )
    first = draw([7, 3])
    assert first.shape == (4, 1000)
    assert first.min() >= 0.0 and first.max() < 1.0
    assert abs(first.mean() - 0.5) < 0.02
    np.testing.assert_array_equal(first, draw([7, 3]))
    assert not np.array_equal(first, draw([7, 4]))
    assert not np.array_equal(first, draw([8, 3]))


def test_uniform_rows_draw_from_their_own_keys():
    seeds = ops.convert_to_tensor([[7, 3], [7, 4], [9, 3]], "int32")
    rows = ops.convert_to_numpy(backend.uniform((3, 500), seeds))
    assert rows.min() >= 0.0 and rows.max() < 1.0
    for b in range(3):
        alone = ops.convert_to_numpy(backend.uniform((1, 500), seeds[b : b + 1]))
        np.testing.assert_array_equal(rows[b], alone[0])
    assert not np.array_equal(rows[0], rows[1])


@pytest.mark.parametrize("donate", [False, True])
def test_update_block_writes_one_block(donate):
    x = ops.zeros((3, 2, 5, 2))
    block = ops.ones((1, 2, 3, 2))
    starts = [ops.convert_to_tensor(i, "int32") for i in (1, 0, 2, 0)]
    out = ops.convert_to_numpy(backend.update_block(x, block, starts, donate=donate))
    expected = np.zeros((3, 2, 5, 2), "float32")
    expected[1, :, 2:5] = 1
    np.testing.assert_array_equal(out, expected)


def test_slice_and_update_slice_take_tensor_starts():
    x = ops.reshape(ops.arange(24, dtype="int32"), (2, 3, 4))
    start = ops.convert_to_tensor(1, "int32")
    sliced = ops.convert_to_numpy(backend.slice(x, start, 2, axis=2))
    np.testing.assert_array_equal(sliced, ops.convert_to_numpy(x)[:, :, 1:3])
    updated = backend.update_slice(x, -ops.ones((2, 1, 4), "int32"), start, axis=1)
    expected = ops.convert_to_numpy(x).copy()
    expected[:, 1] = -1
    np.testing.assert_array_equal(ops.convert_to_numpy(updated), expected)


@pytest.mark.parametrize("broadcast", [False, True])
def test_donated_update_writes_the_same_values(broadcast):
    x = ops.reshape(ops.arange(24, dtype="float32"), (2, 3, 4))
    if broadcast:  # rows that share memory (a repeated row)
        x = ops.repeat(x[:1], 2, axis=0)
    expected = ops.convert_to_numpy(x).copy()
    expected[:, :, 2] = -1
    update = -ops.ones((2, 3, 1))
    start = ops.convert_to_tensor(2, "int32")
    updated = backend.update_slice(x, update, start, axis=2, donate=True)
    np.testing.assert_array_equal(ops.convert_to_numpy(updated), expected)
    x = ops.convert_to_tensor(ops.convert_to_numpy(x))
    starts = ops.convert_to_tensor([2, 2], "int32")
    updated = backend.update_rows(x, update, starts, axis=2, donate=True)
    np.testing.assert_array_equal(ops.convert_to_numpy(updated), expected)
    if keras.config.backend() == "torch" and not broadcast:
        assert updated is x  # written in place, not copied


def test_update_rows_writes_the_first_rows_of_a_larger_tensor():
    x = np.arange(4 * 2 * 5, dtype="float32").reshape(4, 2, 5)
    update = -np.ones((2, 2, 1), "float32")
    updated = backend.update_rows(
        ops.convert_to_tensor(x.copy()),
        ops.convert_to_tensor(update),
        ops.convert_to_tensor([1, 3], "int32"),
        axis=2,
        donate=True,
    )
    expected = x.copy()
    expected[0, :, 1] = expected[1, :, 3] = -1
    np.testing.assert_array_equal(ops.convert_to_numpy(updated), expected)


# A few rows and many: torch multiplies them in different forms.
@pytest.mark.parametrize("shape", [(2, 8), (2, 3, 8), (1, 1, 8)])
def test_matmul_transposed(shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype("float32")
    y = rng.normal(size=(5, 8)).astype("float32")
    result = backend.matmul_transposed(
        ops.convert_to_tensor(x), ops.convert_to_tensor(y)
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(result), x @ y.T, rtol=1e-5, atol=1e-5
    )


def _int8_reference(x, kernel, scale, quantize_inputs):
    # Keras' convention: float weights are `kernel / scale`.
    if quantize_inputs:
        row_scale = 127.0 / (np.abs(x).max(-1, keepdims=True) + keras.config.epsilon())
        x = np.clip(np.round(x * row_scale), -127, 127) / row_scale
    return x @ (kernel.astype("float32") / scale)


# Shapes that divide by nothing (17 in, 5 out), a single row, leading axes,
# an all-zero row.
@pytest.mark.parametrize("quantize_inputs", [True, False])
@pytest.mark.parametrize("shape", [(2, 17), (1, 17), (2, 3, 17)])
@pytest.mark.parametrize("transpose", [False, True])
def test_int8_matmul(shape, quantize_inputs, transpose):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype("float32")
    x[(0,) * (len(shape) - 1)] = 0.0
    kernel = rng.integers(-127, 128, size=(17, 5)).astype("int8")
    scale = rng.uniform(20, 40, size=(5,)).astype("float32")
    stored = kernel.T.copy() if transpose else kernel
    result = backend.int8_matmul(
        ops.convert_to_tensor(x),
        ops.convert_to_tensor(stored),
        ops.convert_to_tensor(scale),
        quantize_inputs=quantize_inputs,
        transpose=transpose,
    )
    result = ops.convert_to_numpy(result)
    assert result.shape == shape[:-1] + (5,) and result.dtype == np.float32
    expected = _int8_reference(x, kernel, scale, quantize_inputs)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(result[(0,) * (len(shape) - 1)], 0.0)


def test_a_donated_argument_comes_back_updated_call_after_call():
    step = backend.compile_function(
        lambda state: {"x": state["x"] + 1, "y": state["y"] * 2},
        [],
        donate_argnums=(0,),
    )
    state = {"x": ops.zeros((3,)), "y": ops.ones((2, 2))}
    for _ in range(3):
        state = step(state)
    np.testing.assert_array_equal(ops.convert_to_numpy(state["x"]), [3, 3, 3])
    np.testing.assert_array_equal(ops.convert_to_numpy(state["y"]), np.full((2, 2), 8))


def test_while_loop_runs_until_cond_fails():
    def cond(state):
        return state["i"] < 5

    def body(state):
        return {"i": state["i"] + 1, "total": state["total"] + state["i"]}

    state = {"i": ops.convert_to_tensor(0), "total": ops.convert_to_tensor(0)}
    result = backend.while_loop(cond, body, state)
    assert int(ops.convert_to_numpy(result["total"])) == 10


def test_compile_function_traces_once_per_shape(traces):
    variable = keras.Variable(2.0)

    def double_sum(x):
        return ops.sum(x) * variable

    compiled = backend.compile_function(double_sum, [variable])
    assert float(compiled(ops.ones((3,)))) == 6.0
    assert float(compiled(ops.zeros((3,)))) == 0.0
    if backend.name() != "torch":  # torch compiles loop steps, not functions
        assert traces() == 1


@pytest.mark.parametrize(
    "name, absent", [("jax", ["tensorflow", "torch"]), ("torch", ["tensorflow"])]
)
def test_import_pulls_in_no_other_framework(name, absent):
    code = f"import sys, keras_gen; print([m for m in {absent!r} if m in sys.modules])"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"KERAS_BACKEND": name, "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"
