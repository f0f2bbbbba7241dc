"""Generate on 8 fake CPU devices and report what happened, as JSON.

Run by `layouts_test.py` in a subprocess, because
`XLA_FLAGS=--xla_force_host_platform_device_count=8` must be set before JAX
starts and would change the devices of the rest of the suite:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 KERAS_BACKEND=jax \
        python -m tests.sharded_generate OUT.json

For each model and mesh it builds the model (same seeded weights) under the
distribution, generates greedily and records: the tokens and logits next to
those of the same model on one device, each weight's sharding and the bytes
each device holds, the sharding of the key/value cache inside the compiled
loop (`jax.debug.inspect_array_sharding`), and how many programs were traced,
compiled by XLA and called per `generate`. For GPT-2 on the 2x4 mesh it
also streams, and saves and reloads the model under the distribution.
"""

import json
import sys
import tempfile
import warnings

import jax
import keras
import numpy as np

from keras_gen import backend
from keras_gen.models import CausalLM
from keras_gen.models import GPT2Backbone
from keras_gen.models import GPT2CausalLM
from keras_gen.models import LlamaBackbone
from keras_gen.models import LlamaCausalLM
from keras_gen.serving import Engine
from keras_gen.streaming import GenerationOutput

# Run as a module from the repository root (see layouts_test.py).
from tests.conftest import set_numpy_weights

# Head counts divide every mesh's model axis: head_dim 4. The weight scale
# gives each model varied greedy tokens whose logits are far apart, so the
# tokens are not decided by the order of float sums, which sharding changes.
MODELS = {
    "gpt2": (
        GPT2Backbone,
        GPT2CausalLM,
        0.3,
        dict(
            vocabulary_size=64,
            num_layers=2,
            num_heads=8,
            hidden_dim=32,
            intermediate_dim=64,
            max_sequence_length=64,
        ),
    ),
    "llama": (
        LlamaBackbone,
        LlamaCausalLM,
        1.0,
        dict(
            vocabulary_size=64,
            num_layers=2,
            num_query_heads=8,
            num_key_value_heads=8,
            hidden_dim=32,
            intermediate_dim=64,
        ),
    ),
    # Shapes the mesh does not divide: a vocabulary of 300 (the head splits
    # its hidden rows instead), 3 key/value heads of 4 (k_proj and v_proj
    # whole), 6 query heads (attention whole, q_proj columns split).
    "llama_odd": (
        LlamaBackbone,
        LlamaCausalLM,
        1.0,
        dict(
            vocabulary_size=300,
            num_layers=2,
            num_query_heads=6,
            num_key_value_heads=3,
            hidden_dim=24,
            intermediate_dim=64,
        ),
    ),
}
# (model, key/value heads override, mesh shape (data, model)).
RUNS = [
    ("gpt2", None, (1, 8)),
    ("gpt2", None, (2, 4)),
    ("gpt2", None, (8, 1)),
    ("llama", 8, (1, 8)),
    ("llama", 4, (2, 4)),
    ("llama", 8, (8, 1)),
    # 4 key/value heads on a model axis of 8: the cache is not split by heads.
    ("llama", 4, (1, 8)),
    ("llama_odd", None, (1, 8)),
    ("llama_odd", None, (2, 4)),
]
# 8 rows, so that a data axis of 8 (or 2) splits them.
PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [8, 9], [10, 11, 12], [13], [14, 15], [16], [20]]
MAX_NEW_TOKENS = 8


def build(name, num_key_value_heads):
    backbone_class, lm_class, scale, config = MODELS[name]
    config = dict(config)
    if num_key_value_heads is not None:
        config["num_key_value_heads"] = num_key_value_heads
    backbone = set_numpy_weights(backbone_class(**config), seed=1, scale=scale)
    return lm_class(backbone), config


def generate(lm):
    record = lm.generate(
        PROMPTS, max_new_tokens=MAX_NEW_TOKENS, return_dict=True, output_logits=True
    )
    return [list(map(int, row)) for row in record.token_ids], record.logits


def distribution_for(name, mesh_shape):
    devices = keras.distribution.list_devices()
    if mesh_shape[1] == 1:
        mesh = keras.distribution.DeviceMesh((mesh_shape[0],), ["batch"], devices)
        return keras.distribution.DataParallel(device_mesh=mesh)
    mesh = keras.distribution.DeviceMesh(mesh_shape, ["batch", "model"], devices)
    layout_map = MODELS[name][0].get_layout_map(mesh)
    return keras.distribution.ModelParallel(
        layout_map=layout_map, batch_dim_name="batch"
    )


def spy_on_cache(lm):
    """Record the sharding XLA gives each layer's cache inside the loop."""
    seen = []
    call_with_state = lm.backbone.call_with_state

    def spied(token_ids, state, index):
        logits, hidden_states, state = call_with_state(token_ids, state, index)
        for layer in state:
            # A (keys, values) pair, or the engine's `CacheView` of a slot.
            key_cache, value_cache = layer[:2]
            for cache in (key_cache, value_cache):
                shape = tuple(cache.shape)
                jax.debug.inspect_array_sharding(
                    cache,
                    callback=lambda s, shape=shape, dtype=cache.dtype: seen.append(
                        {
                            "shape": shape,
                            "spec": [None if a is None else str(a) for a in s.spec]
                            if hasattr(s, "spec")
                            else str(s),
                            "shard_shape": list(s.shard_shape(shape)),
                            "bytes_per_device": int(
                                np.prod(s.shard_shape(shape)) * np.dtype(dtype).itemsize
                            ),
                        }
                    ),
                )
        return logits, hidden_states, state

    lm.backbone.call_with_state = spied
    return seen


def weight_report(lm):
    per_device = {}
    specs = {}
    for variable in lm.backbone.weights:
        value = variable.value
        specs[variable.path.split("/", 1)[1]] = [
            None if a is None else str(a) for a in value.sharding.spec
        ]
        for shard in value.addressable_shards:
            device = shard.device.id
            per_device[device] = per_device.get(device, 0) + shard.data.nbytes
    return specs, sorted(per_device.values())


class CompileCounter:
    """Names the programs XLA compiles (JAX reports each via `jax.monitoring`).

    `generate`'s program is `jit(stateless_fn)` (see `jax_backend`); reading
    its outputs on the host may compile tiny eager ops as well.
    """

    def __init__(self):
        self.names = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            self.names.append(kwargs.get("fun_name", "?"))

    def since(self, start):
        return self.names[start:]


def count_calls(lm):
    calls = [0]
    for key, function in lm.programs.items():
        if key[0] != "generate":
            continue

        def counted(*args, function=function, **kwargs):
            calls[0] += 1
            return function(*args, **kwargs)

        lm.programs.replace(key, counted)
    return calls


def load_under_distribution(lm):
    """Save `lm`, load it back under the active distribution, generate."""
    with tempfile.TemporaryDirectory() as path:
        lm.save_pretrained(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no tokenizer in the folder
            loaded = CausalLM.from_pretrained(path)
    kernel = loaded.backbone.transformer_layers[0].c_attn.kernel.value
    tokens, _ = generate(loaded)
    return {
        "c_attn_spec": [None if a is None else str(a) for a in kernel.sharding.spec],
        "tokens": tokens,
    }


def serve(lm):
    """Greedy tokens of `PROMPTS` through an `Engine` of 4 slots, and the
    layout of its cache."""
    with Engine(lm, max_batch_size=4, max_length=32, chunk_size=3) as engine:
        handles = [
            engine.submit(p, max_new_tokens=MAX_NEW_TOKENS, temperature=0)
            for p in PROMPTS
        ]
        tokens = [list(map(int, h.result(300).token_ids[0])) for h in handles]
        cache = engine._device[0][0]
        spec = [
            None if a is None else str(a) for a in getattr(cache.sharding, "spec", ())
        ]
    return {"tokens": tokens, "cache_spec": spec}


def mismatched_map():
    """The error of a Llama model built under GPT-2's layout map."""
    mesh = keras.distribution.DeviceMesh(
        (2, 4), ["batch", "model"], keras.distribution.list_devices()
    )
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(
            layout_map=GPT2Backbone.get_layout_map(mesh), batch_dim_name="batch"
        )
    )
    try:
        build("llama", None)
    except ValueError as error:
        return str(error)
    finally:
        keras.distribution.set_distribution(None)
    return None


def run(name, num_key_value_heads, mesh_shape, compiles):
    keras.distribution.set_distribution(None)
    reference_tokens, reference_logits = generate(build(name, num_key_value_heads)[0])
    keras.distribution.set_distribution(distribution_for(name, mesh_shape))
    try:
        lm, config = build(name, num_key_value_heads)
        seen = spy_on_cache(lm)
        traces, compiled = backend.trace_count(), len(compiles.names)
        tokens, logits = generate(lm)
        first = {
            "traces": backend.trace_count() - traces,
            "xla_compiles": compiles.since(compiled),
        }
        calls = count_calls(lm)
        traces, compiled = backend.trace_count(), len(compiles.names)
        again, _ = generate(lm)
        second = {
            "traces": backend.trace_count() - traces,
            "xla_compiles": compiles.since(compiled),
            "calls": calls[0],
        }
        specs, weight_bytes = weight_report(lm)
        stream = loaded = served = None
        if mesh_shape == (2, 4) and name != "llama":
            keras.distribution.set_distribution(None)
            served_reference = serve(build(name, num_key_value_heads)[0])
            keras.distribution.set_distribution(distribution_for(name, mesh_shape))
            served = {**serve(lm), "reference_tokens": served_reference["tokens"]}
        if (name, mesh_shape) == ("gpt2", (2, 4)):
            chunks = lm.stream(PROMPTS, max_new_tokens=MAX_NEW_TOKENS)
            joined = GenerationOutput.join(list(chunks))
            stream = [list(map(int, row)) for row in joined.token_ids]
            loaded = load_under_distribution(lm)
        return {
            "model": name,
            "mesh": list(mesh_shape),
            "config": config,
            "tokens": tokens,
            "reference_tokens": reference_tokens,
            "again_tokens": again,
            "stream_tokens": stream,
            "loaded": loaded,
            "served": served,
            # The smallest gap between the best and second-best logit of a
            # greedy step on one device: the tokens are robust if it dwarfs
            # the sharded logits' difference.
            "min_greedy_margin": min(
                float(np.min(np.diff(np.sort(row, axis=-1)[:, -2:], axis=-1)))
                for row in reference_logits
            ),
            "max_logits_difference": max(
                float(np.max(np.abs(row - reference_row)))
                for row, reference_row in zip(logits, reference_logits)
            ),
            "weight_specs": specs,
            "weight_bytes_per_device": weight_bytes,
            "cache": seen,
            "first_generate": first,
            "second_generate": second,
        }
    finally:
        keras.distribution.set_distribution(None)


def main(path):
    assert jax.device_count() == 8, jax.devices()
    compiles = CompileCounter()
    results = [run(*spec, compiles) for spec in RUNS]
    with open(path, "w") as f:
        json.dump({"runs": results, "mismatched_map": mismatched_map()}, f)


if __name__ == "__main__":
    main(sys.argv[1])
