"""Layouts on a device mesh, and generation sharded across 8 devices (JAX).

The sharded runs happen once, in a subprocess with 8 fake CPU devices
(`tests/sharded_generate.py`); the tests below check its report.
"""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_gen import layouts
from keras_gen.models import GPT2Backbone
from keras_gen.models import LlamaBackbone
from tests.conftest import tiny_gpt2_backbone

ROOT = pathlib.Path(__file__).parents[1]
FLOAT32_BYTES = 4


def _mesh(shape, names):
    # Names of devices only: building a layout map touches no device.
    devices = [f"cpu:{i}" for i in range(int(np.prod(shape)))]
    return keras.distribution.DeviceMesh(shape, names, devices)


# Layout maps: which weight goes where. No devices needed.


def _axes(layout_map, path):
    layout = layout_map[path]
    return None if layout is None else tuple(layout.axes)


def test_gpt2_layout_map_shards_columns_then_rows():
    layout_map = GPT2Backbone.get_layout_map(_mesh((2, 4), ["batch", "model"]))
    backbone = tiny_gpt2_backbone()
    expected = {
        "wte/embeddings": (None, "model"),
        "wpe/embeddings": (None, "model"),
        "h_1/c_attn/kernel": (None, "model"),
        "h_1/c_attn/bias": ("model",),
        "h_1/c_proj/kernel": ("model", None),
        "h_1/c_proj/bias": None,
        "h_1/c_fc/kernel": (None, "model"),
        "h_1/c_fc/bias": ("model",),
        "h_1/mlp_c_proj/kernel": ("model", None),
        "h_1/mlp_c_proj/bias": None,
        "h_1/ln_1/gamma": None,
        "ln_f/beta": None,
    }
    paths = {v.path.split("/", 1)[1]: v.path for v in backbone.weights}
    for short, axes in expected.items():
        assert _axes(layout_map, paths[short]) == axes, short
    assert _axes(layout_map, layouts.HEADS_KEY) == ("batch", "model", None, None)


def test_llama_layout_map_shards_heads_and_mlp():
    layout_map = LlamaBackbone.get_layout_map(
        _mesh((2, 4), ["data", "tensor"]),
        model_parallel_dim_name="tensor",
        data_parallel_dim_name="data",
    )
    backbone = LlamaBackbone(
        vocabulary_size=64,
        num_layers=2,
        num_query_heads=4,
        num_key_value_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        query_key_value_bias=True,
        name="qwen",
    )
    axes = {v.path: _axes(layout_map, v.path) for v in backbone.weights}
    assert axes["qwen/embed_tokens/embeddings"] == (None, "tensor")
    assert axes["qwen/lm_head/kernel"] == (None, "tensor")
    for name in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"):
        assert axes[f"qwen/layers_1/{name}/kernel"] == (None, "tensor")
    for name in ("q_proj", "k_proj", "v_proj"):
        assert axes[f"qwen/layers_1/{name}/bias"] == ("tensor",)
    for name in ("o_proj", "down_proj"):
        assert axes[f"qwen/layers_1/{name}/kernel"] == ("tensor", None)
    assert axes["qwen/layers_1/input_layernorm/scale"] is None
    assert axes["qwen/norm/scale"] is None
    assert _axes(layout_map, layouts.HEADS_KEY) == ("data", "tensor", None, None)


@pytest.mark.parametrize(
    "kind",
    ["gpt2", "llama", "qwen2", "qwen3_moe", "gemma2", "phi3", "olmo2", "mixtral"],
)
def test_every_family_map_names_every_kernel_from_the_instance(kind):
    hf_models = pytest.importorskip("tests.models.hf_models")
    from keras_gen.models import architectures
    from keras_gen.models import checkpoint

    config = hf_models._config(kind).to_dict()
    name = checkpoint.architecture(config)
    backbone = architectures.ARCHITECTURES[name].backbone_from_config(
        config, name, dtype="float32"
    )
    layout_map = backbone.get_layout_map(_mesh((2, 4), ["batch", "model"]))
    unnamed = [
        v.path
        for v in backbone.weights
        if len(v.shape) >= 2 and layouts._rule(layout_map, v.path) is None
    ]
    assert not unnamed


def test_rules_take_the_first_choice_the_mesh_divides():
    mesh = _mesh((1, 8), ["batch", "model"])
    layout_map = layouts.make_layout_map(
        mesh, [("head", [(None, "model"), ("model", None)])], "model", "batch"
    )
    fitted = layouts._FittedDistribution(
        keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    )

    class Weight:
        path = "head"

        def __init__(self, shape):
            self.shape = shape

    assert fitted.get_variable_layout(Weight((24, 320))).axes == (None, "model")
    assert fitted.get_variable_layout(Weight((24, 300))).axes == ("model", None)
    assert fitted.get_variable_layout(Weight((20, 300))).axes == (None, None)
    assert fitted.named == 3 and not fitted.unnamed


def test_layout_map_names_a_missing_mesh_axis():
    with pytest.raises(ValueError, match="no axis 'model'"):
        GPT2Backbone.get_layout_map(_mesh((8,), ["batch"]))


def test_layouts_do_nothing_without_a_distribution():
    assert keras.distribution.distribution() is None
    x = keras.ops.ones((2, 4, 3, 2))
    assert layouts.heads_layout((2, 4, 3, 2)) is None
    assert layouts.shard_heads(x) is x
    assert layouts.shard_batch(x) is x


def test_axes_that_do_not_divide_are_left_whole():
    mesh = _mesh((2, 4), ["batch", "model"])
    layout = keras.distribution.TensorLayout(("batch", "model", None, None), mesh)
    assert layouts._fit(layout, (8, 8, 16, 4)).axes == ("batch", "model", None, None)
    # One row on a data axis of 2; 2 key/value heads on a model axis of 4.
    assert layouts._fit(layout, (1, 2, 16, 4)).axes == (None, None, None, None)


@pytest.mark.only_backend("tensorflow", "torch")
def test_other_backends_refuse_a_distribution(gpt2_lm):
    mesh = keras.distribution.DeviceMesh((1,), ["batch"], ["cpu:0"])
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(device_mesh=mesh)
    )
    try:
        with pytest.raises(RuntimeError, match="JAX backend only"):
            gpt2_lm.generate([1, 2, 3], max_new_tokens=2)
        with pytest.raises(RuntimeError, match="JAX backend only"):
            list(gpt2_lm.stream([1, 2, 3], max_new_tokens=2))
    finally:
        keras.distribution.set_distribution(None)
    assert len(gpt2_lm.generate([1, 2, 3], max_new_tokens=2)) == 5


# Sharded generation on 8 fake devices.


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded") / "runs.json"
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
        ),
    }
    # As a module: a script's own folder leads sys.path, and tests/ has a
    # `tokenizers` folder that would hide the library.
    subprocess.run(
        [sys.executable, "-m", "tests.sharded_generate", str(out)],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=900,
    )
    report = json.loads(out.read_text())
    runs = {
        (r["model"], tuple(r["mesh"]), r["config"].get("num_key_value_heads")): r
        for r in report["runs"]
    }
    return {**runs, "mismatched_map": report["mismatched_map"]}


RUN_KEYS = [
    ("gpt2", (1, 8), None),
    ("gpt2", (2, 4), None),
    ("gpt2", (8, 1), None),
    ("llama", (1, 8), 8),
    ("llama", (2, 4), 4),
    ("llama", (8, 1), 8),
    ("llama", (1, 8), 4),
    ("llama_odd", (1, 8), 3),
    ("llama_odd", (2, 4), 3),
]
RUN_IDS = [f"{m}-{d}x{p}-kv{kv}" for m, (d, p), kv in RUN_KEYS]


def _sharded(test):
    """A JAX-only, slow test of each sharded run's report."""
    test = pytest.mark.parametrize("key", RUN_KEYS, ids=RUN_IDS)(test)
    return pytest.mark.slow(pytest.mark.only_backend("jax")(test))


@_sharded
def test_sharded_greedy_tokens_equal_one_device(sharded_runs, key):
    run = sharded_runs[key]
    assert run["tokens"] == run["reference_tokens"]
    assert run["again_tokens"] == run["tokens"]
    # Not a degenerate model: varied tokens, decided by clear margins.
    assert len({t for row in run["tokens"] for t in row}) >= 8
    assert run["max_logits_difference"] < 1e-3 < run["min_greedy_margin"]


@_sharded
def test_generate_is_one_compiled_program(sharded_runs, key):
    run = sharded_runs[key]
    # The first call traces and XLA-compiles one program (`jit(stateless_fn)`:
    # cache seeding and the whole loop); other compiles are eager reads of
    # its outputs on the host.
    assert run["first_generate"]["traces"] == 1
    assert run["first_generate"]["xla_compiles"].count("jit(stateless_fn)") == 1
    # The second call is one call of that program: nothing traced or
    # compiled, no host round trip per step.
    assert run["second_generate"] == {"traces": 0, "xla_compiles": [], "calls": 1}


def _weight_parameters(model, config, model_size):
    """(split over the model axis, whole on every device), in parameters.

    A weight is split where the model axis divides the dimension its rule
    splits; the head splits its hidden rows where it does not divide the
    vocabulary; anything else is whole.
    """
    h, inner = config["hidden_dim"], config["intermediate_dim"]
    layers, vocabulary = config["num_layers"], config["vocabulary_size"]
    if model == "gpt2":
        split = (
            vocabulary * h
            + config["max_sequence_length"] * h
            + layers * (4 * h * h + 3 * h + 2 * h * inner + inner)
        )
        whole = layers * 6 * h + 2 * h  # layer norms, row-parallel biases
        return split, whole
    head_dim = h // config["num_query_heads"]
    query = config["num_query_heads"] * head_dim
    key = config["num_key_value_heads"] * head_dim
    split, whole = 2 * vocabulary * h + layers * 3 * h * inner, layers * 2 * h + h
    for width in (query, key, key, query):  # q, k, v columns; o rows
        if width % model_size == 0:
            split += layers * h * width
        else:
            whole += layers * h * width
    return split, whole


@_sharded
def test_weights_per_device_follow_the_formula(sharded_runs, key):
    run = sharded_runs[key]
    model, (data, model_size), _ = key
    split, whole = _weight_parameters(model, run["config"], model_size)
    expected = FLOAT32_BYTES * (split // model_size + whole)
    assert run["weight_bytes_per_device"] == [expected] * 8
    specs = run["weight_specs"]
    if model_size == 1:
        assert all(all(a is None for a in spec) for spec in specs.values())
    elif model == "gpt2":
        assert specs["h_0/c_attn/kernel"] == [None, "model"]
        assert specs["h_0/c_proj/kernel"] == ["model", None]
    else:
        config = run["config"]
        key_width = (
            config["num_key_value_heads"]
            * config["hidden_dim"]
            // config["num_query_heads"]
        )
        keys = "model" if key_width % model_size == 0 else None
        assert specs["layers_0/k_proj/kernel"] == [None, keys]
        assert specs["layers_0/down_proj/kernel"] == ["model", None]
        # The head splits the vocabulary, or its hidden rows where the
        # model axis does not divide the vocabulary.
        vocabulary_split = config["vocabulary_size"] % model_size == 0
        assert specs["lm_head/kernel"] == (
            [None, "model"] if vocabulary_split else ["model", None]
        )


@_sharded
def test_cache_per_device_follows_the_formula(sharded_runs, key):
    run = sharded_runs[key]
    model, (data, model_size), kv = key
    config = run["config"]
    kv_heads = config.get("num_key_value_heads", config.get("num_heads"))
    cache = run["cache"]
    # One key and one value cache per layer, seen inside the compiled loop.
    assert len(cache) % (2 * config["num_layers"]) == 0
    heads_split = kv_heads % model_size == 0
    for entry in cache:
        batch, heads, length, head_dim = entry["shape"]
        assert heads == kv_heads
        expected = (
            FLOAT32_BYTES
            * batch
            * heads
            * length
            * head_dim
            // (data * (model_size if heads_split else 1))
        )
        assert entry["bytes_per_device"] == expected
        spec = entry["spec"] + [None] * (4 - len(entry["spec"]))
        assert spec[0] == ("batch" if data > 1 else None)
        assert spec[1] == ("model" if heads_split and model_size > 1 else None)


@pytest.mark.only_backend("jax")
@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2", "llama_odd"])
def test_the_engine_under_model_parallel_serves_the_same_tokens(sharded_runs, model):
    run = sharded_runs[(model, (2, 4), 3 if model == "llama_odd" else None)]
    served = run["served"]
    assert served["tokens"] == served["reference_tokens"]
    # Slots over the data axis; heads over the model axis where they divide.
    heads = "model" if model == "gpt2" else None
    assert (served["cache_spec"] + [None] * 4)[:2] == ["batch", heads]


@pytest.mark.only_backend("jax")
@pytest.mark.slow
def test_a_layout_map_of_another_family_is_refused(sharded_runs):
    message = sharded_runs["mismatched_map"]
    assert message is not None
    assert "names none of LlamaBackbone's kernels" in message
    assert "LlamaBackbone.get_layout_map(mesh)" in message


@pytest.mark.only_backend("jax")
@pytest.mark.slow
def test_stream_under_model_parallel_joins_to_generate(sharded_runs):
    run = sharded_runs[("gpt2", (2, 4), None)]
    assert run["stream_tokens"] == run["tokens"]


@pytest.mark.only_backend("jax")
@pytest.mark.slow
def test_checkpoint_loads_sharded_under_a_distribution(sharded_runs):
    run = sharded_runs[("gpt2", (2, 4), None)]
    assert run["loaded"]["c_attn_spec"] == [None, "model"]
    assert run["loaded"]["tokens"] == run["tokens"]
