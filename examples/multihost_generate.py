"""Generate with one model sharded across several processes (JAX multi-host).

Run one process per host, each with its rank, all pointing at the first:

    python examples/multihost_generate.py --coordinator HOST0:1234 --process-id 0
    python examples/multihost_generate.py --coordinator HOST0:1234 --process-id 1

Every process loads the same model under the same distribution (a mesh over
all hosts' devices: the data axis across hosts, the model axis within one)
and calls `generate` with the same global batch; XLA runs one program over
the whole mesh. Each process receives the whole result (outputs sharded on
other hosts are gathered) and prints one JSON line. `--cpu-devices 4` fakes
4 CPU devices per process, with CPU collectives, so that two processes on
one machine stand for two hosts (what the tests do).
"""

import argparse
import json
import os

PROMPTS = ["The for statement", "A class definition", "Exceptions are", "The while"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coordinator", required=True, help="HOST:PORT of process 0")
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--cpu-devices", type=int, default=None)
    parser.add_argument("--model", default="demo")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args(argv)

    # Before JAX starts.
    os.environ["KERAS_BACKEND"] = "jax"
    if args.cpu_devices:
        os.environ["XLA_FLAGS"] = (
            f"--xla_force_host_platform_device_count={args.cpu_devices}"
        )
    import jax

    if args.cpu_devices:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
    )
    import keras

    import keras_gen

    devices = keras.distribution.list_devices()  # every host's
    local = len(jax.local_devices())
    mesh = keras.distribution.DeviceMesh(
        (len(devices) // local, local), ("batch", "model"), devices
    )
    # The map's rules only: the model built under the distribution fits
    # each weight's layout to its shape.
    layout_map = keras_gen.models.GPT2Backbone.get_layout_map(mesh)
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    )
    # A sharded variable is made from one value that every process passes:
    # the same seed gives every process the same initial values (which the
    # checkpoint's weights then replace).
    keras.utils.set_random_seed(0)
    lm = keras_gen.CausalLM.from_preset(args.model)
    record = lm.generate(
        PROMPTS, max_new_tokens=args.max_new_tokens, do_sample=False, return_dict=True
    )
    print(
        json.dumps(
            {
                "process": jax.process_index(),
                "devices": len(devices),
                "mesh": list(mesh.shape),
                "tokens": record.token_ids,
                "text": record.text,
            }
        ),
        flush=True,
    )
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
