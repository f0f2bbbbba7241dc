"""Generate with a model sharded over a 2x4 device mesh (JAX).

    python examples/distributed_generate.py

Eight devices make a mesh of 2 data-parallel replicas, each holding the
model split 4 ways by tensor parallelism. Without 8 accelerators the script
fakes 8 CPU devices, so it runs anywhere.

Several hosts: see `examples/multihost_generate.py` (one process per host,
the data axis across hosts, the model axis within one).
"""

import argparse
import os

# Must be set before JAX starts. It only adds CPU devices: on a machine with
# accelerators, JAX still uses those.
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import keras  # noqa: E402

import keras_gen  # noqa: E402

# `--help` shows the docstring; the example takes no arguments.
argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
).parse_args()

devices = keras.distribution.list_devices()[:8]
mesh = keras.distribution.DeviceMesh(
    shape=(2, 4), axis_names=("batch", "model"), devices=devices
)
layout_map = keras_gen.models.GPT2Backbone.get_layout_map(
    mesh, model_parallel_dim_name="model", data_parallel_dim_name="batch"
)
keras.distribution.set_distribution(
    keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
)

# Created under the distribution, so each weight is born sharded: no device
# ever holds the whole model. (A checkpoint loads the same way:
# `CausalLM.from_pretrained(path)` after `set_distribution`.) Heads (8) and
# the MLP width divide by the model axis (4).
backbone = keras_gen.models.GPT2Backbone(
    vocabulary_size=100,
    num_layers=2,
    num_heads=8,
    hidden_dim=32,
    intermediate_dim=64,
    max_sequence_length=128,
)
lm = keras_gen.models.GPT2CausalLM(backbone)
kernel = backbone.transformer_layers[0].c_attn.kernel
print("c_attn kernel", tuple(kernel.shape), "sharded as", kernel.value.sharding.spec)

# One compiled program, partitioned by XLA: the 4 prompts split over the
# 2 replicas, the attention heads and the key/value cache over the 4 model
# devices of each.
print(lm.generate([[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]], max_new_tokens=8))
