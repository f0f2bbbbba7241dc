"""Side-by-side generation benchmark: keras-gen, keras-hub and transformers.

The reference workload is keras-nlp's compiled-generation benchmark: GPT-2
small (vocab 50257, 12 layers, 12 heads, hidden 768), batch 2, a 32-token
prompt, greedy, generated to `max_length=256` with no early stop. All systems
run the same weights: random GPT-2 weights are written once as a Hugging Face
folder (or `--model PATH` names a real one) and each system loads them. Each
system runs in its own process (clean compile caches and peak memory), one
after the other, in this one run.

    KERAS_BACKEND=jax python tools/benchmark.py
    python tools/benchmark.py --backend torch --stream --json results.json
    python tools/benchmark.py --tiny --repeats 1      # a smoke test

Reported per system: first call (compile + run), time to first token,
steady milliseconds per decode step and new tokens per second (median of
`--repeats` runs), peak resident memory, and keras-gen's ratio to each peer.
It also checks that every system produced the same greedy tokens.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

GPT2_SMALL = dict(
    vocabulary_size=50257,
    num_layers=12,
    num_heads=12,
    hidden_dim=768,
    intermediate_dim=3072,
    max_sequence_length=1024,
)
TINY = dict(
    vocabulary_size=96,
    num_layers=2,
    num_heads=2,
    hidden_dim=32,
    intermediate_dim=128,  # keras-hub's GPT-2 fixes it at 4 * hidden_dim
    max_sequence_length=128,
)
SYSTEMS = ("keras-gen", "keras-hub", "transformers")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a Hugging Face GPT-2 folder (default: random GPT-2 small)")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model, for smoke tests")
    parser.add_argument("--backend", default=os.environ.get("KERAS_BACKEND", "jax"),
                        choices=["jax", "tensorflow", "torch"])
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated, from {','.join(SYSTEMS)},transformers-compiled")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--sampler", default="greedy")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stream", action="store_true", help="also time keras-gen's stream")
    parser.add_argument("--ttft-max-length", type=int, default=1024,
                        help="also time keras-gen's first token with this max_length")
    parser.add_argument("--quantize", choices=["int8", "int8-activations"],
                        help="also run keras-gen quantized (int8: weight-only; "
                             "int8-activations: Keras' int8, activations too) and "
                             "report its drift from float32")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--system", help=argparse.SUPPRESS)  # a child process
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("batch", "prompt_length", "max_length", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.prompt_length >= args.max_length:
        parser.error("--prompt-length must be below --max-length")
    return args


def prompts(args, vocabulary_size):
    rng = np.random.default_rng(0)
    return rng.integers(0, vocabulary_size, (args.batch, args.prompt_length)).tolist()


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def peak_memory_mb():
    # This process's own high-water mark. `ru_maxrss` would also count the
    # parent that wrote the weights: Linux carries it across `exec`.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def summarize(args, first_call, total, ttft, tokens):
    new_tokens = args.max_length - args.prompt_length
    return {
        "first_call_s": first_call,
        "time_to_first_token_ms": None if ttft is None else 1000 * ttft,
        "ms_per_step": 1000 * (total - (ttft or 0)) / max(new_tokens - (ttft is not None), 1),
        "tokens_per_s": args.batch * new_tokens / total,
        "total_s": total,
        "peak_memory_mb": peak_memory_mb(),
        "tokens": tokens,
    }


def run_keras_gen(args, quantize=None):
    import keras_gen

    lm = keras_gen.models.CausalLM.from_pretrained(args.weights)
    if quantize:
        lm.quantize("int8", quantize_activations=quantize == "int8-activations")
    lm.compile(sampler=args.sampler)
    batch = prompts(args, lm.backbone.vocabulary_size)
    kwargs = dict(max_length=args.max_length, stop_token_ids=None, seed=0)

    def generate():
        return lm.generate(batch, **kwargs)

    def first_token(max_length):
        stream = lm.stream(batch, max_length=max_length, stop_token_ids=None,
                           seed=0, stream_chunk_size=1)
        next(stream)
        stream.close()

    start = time.perf_counter()
    tokens = generate()
    first_call = time.perf_counter() - start
    first_token(args.max_length)  # compiles the stream programs
    total, tokens = timed(generate, args.repeats)
    ttft, _ = timed(lambda: first_token(args.max_length), args.repeats)
    result = summarize(args, first_call, total, ttft, [t[args.prompt_length:] for t in tokens])
    if args.ttft_max_length and not quantize:
        long = min(args.ttft_max_length, lm.backbone.max_sequence_length or args.ttft_max_length)
        first_token(long)
        result["time_to_first_token_long_ms"] = 1000 * timed(
            lambda: first_token(long), args.repeats)[0]
        result["ttft_long_max_length"] = long
    if args.stream:
        def stream_all():
            for _ in lm.stream(batch, **kwargs):
                pass

        stream_all()
        # Alternated with generate, so that a machine that speeds up or slows
        # down during the run does not pass for streaming's cost.
        pairs = [(timed(generate, 1)[0], timed(stream_all, 1)[0])
                 for _ in range(args.repeats)]
        ratio = statistics.median(s / g for g, s in pairs)
        result["stream_tokens_per_s"] = result["tokens_per_s"] / ratio
        result["stream_overhead"] = ratio - 1
    if args.quantize:
        # The float and quantized runs compare their greedy log-probs.
        output = lm.generate(batch, **kwargs, return_dict=True, output_log_probs=True)
        result["log_probs"] = [row.tolist() for row in output.log_probs]
    return result


def run_keras_hub(args):
    import keras
    import keras_hub
    from keras_hub.src.utils.transformers import convert_gpt2
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    with open(os.path.join(args.weights, "config.json")) as file:
        config = json.load(file)
    backbone = keras_hub.models.GPT2Backbone(**convert_gpt2.convert_backbone_config(config))
    with SafetensorLoader(args.weights) as loader:
        convert_gpt2.convert_weights(backbone, loader, config)
    lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    lm.compile(sampler=args.sampler)
    batch = np.array(prompts(args, config["vocab_size"]), "int32")
    token_ids = np.zeros((args.batch, args.max_length), "int32")
    token_ids[:, : args.prompt_length] = batch
    inputs = {"token_ids": token_ids, "padding_mask": token_ids * 0 + (
        np.arange(args.max_length) < args.prompt_length)}
    keras.utils.set_random_seed(0)

    def generate():
        return lm.generate(inputs, stop_token_ids=None)

    start = time.perf_counter()
    generate()
    first_call = time.perf_counter() - start
    total, outputs = timed(generate, args.repeats)
    tokens = np.asarray(outputs["token_ids"])[:, args.prompt_length :].tolist()
    return summarize(args, first_call, total, None, tokens)


def run_transformers(args, compiled=False):
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.weights, dtype=torch.float32)
    model.eval()
    batch = torch.tensor(prompts(args, model.config.vocab_size))
    new_tokens = args.max_length - args.prompt_length
    kwargs = dict(attention_mask=torch.ones_like(batch), do_sample=args.sampler != "greedy",
                  pad_token_id=0)
    if compiled:
        kwargs["cache_implementation"] = "static"
        model.forward = torch.compile(model.forward, dynamic=False)

    def generate(n=new_tokens):
        with torch.no_grad():
            return model.generate(batch, max_new_tokens=n, min_new_tokens=n, **kwargs)

    start = time.perf_counter()
    generate()
    first_call = time.perf_counter() - start
    generate(1)
    total, outputs = timed(generate, args.repeats)
    ttft, _ = timed(lambda: generate(1), args.repeats)
    tokens = outputs[:, args.prompt_length :].tolist()
    return summarize(args, first_call, total, ttft, tokens)


def run_system(args):
    runners = {
        "keras-gen": run_keras_gen,
        "keras-gen-int8": lambda a: run_keras_gen(a, quantize="int8"),
        "keras-gen-int8-activations": lambda a: run_keras_gen(a, quantize="int8-activations"),
        "keras-hub": run_keras_hub,
        "transformers": run_transformers,
        "transformers-compiled": lambda a: run_transformers(a, compiled=True),
    }
    print(json.dumps(runners[args.system](args)))


def write_random_weights(args, folder):
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    import keras_gen

    keras.utils.set_random_seed(0)
    config = TINY if args.tiny else GPT2_SMALL
    backbone = keras_gen.models.GPT2Backbone(**config)
    # Wider than GPT-2's 0.02 initialisation, so that greedy choices are not
    # decided by float rounding and the token check is meaningful.
    rng = np.random.default_rng(0)
    for variable in backbone.weights:
        if not variable.path.endswith(("gamma", "beta", "bias")):
            variable.assign(rng.normal(0, 0.05, variable.shape).astype("float32"))
    keras_gen.models.GPT2CausalLM(backbone).save_pretrained(folder)


def child(args, system, backend):
    command = [sys.executable, os.path.abspath(__file__), "--system", system,
               "--weights", args.weights, "--batch", str(args.batch),
               "--prompt-length", str(args.prompt_length),
               "--max-length", str(args.max_length), "--sampler", args.sampler,
               "--repeats", str(args.repeats),
               "--ttft-max-length", str(args.ttft_max_length)]
    if args.stream:
        command.append("--stream")
    if args.quantize:
        command += ["--quantize", args.quantize]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        return {"error": result.stderr.strip().splitlines()[-1:] or ["failed"]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def drift(reference, quantized):
    """Where greedy tokens first differ, and the largest log-prob change
    over the positions before it (after it the rows run different text)."""
    agree, change = [], 0.0
    for tokens, other, log_probs, other_log_probs in zip(
            reference["tokens"], quantized["tokens"],
            reference["log_probs"], quantized["log_probs"]):
        same = next((i for i, (a, b) in enumerate(zip(tokens, other)) if a != b), len(tokens))
        agree.append(same)
        # Up to and including the first differing position: its log-prob
        # is of a different token, the change that flipped the choice.
        n = min(same + 1, len(tokens))
        change = max(change, float(np.abs(np.subtract(log_probs[:n], other_log_probs[:n])).max()))
    return (f"greedy tokens agree for {agree} of {len(reference['tokens'][0])} new "
            f"tokens per row; max |log-prob change| {change:.4f} up to the first difference")


def report(args, results):
    print(f"\nbackend={args.backend} batch={args.batch} prompt={args.prompt_length} "
          f"max_length={args.max_length} sampler={args.sampler} repeats={args.repeats}")
    header = f"{'system':24} {'first call s':>12} {'TTFT ms':>9} {'ms/step':>8} {'tokens/s':>9} {'peak MB':>8}"
    print(header)
    for name, r in results.items():
        if "error" in r:
            print(f"{name:24} error: {r['error']}")
            continue
        ttft = "n/a" if r["time_to_first_token_ms"] is None else f"{r['time_to_first_token_ms']:.1f}"
        print(f"{name:24} {r['first_call_s']:12.1f} {ttft:>9} {r['ms_per_step']:8.1f} "
              f"{r['tokens_per_s']:9.1f} {r['peak_memory_mb']:8.0f}")
    ours = results.get("keras-gen", {})
    if "error" in ours or not ours:
        return
    for name, r in results.items():
        if name == "keras-gen" or "error" in r:
            continue
        same = sum(a == b for a, b in zip(ours["tokens"], r["tokens"]))
        print(f"keras-gen / {name}: time per step x{ours['ms_per_step'] / r['ms_per_step']:.2f}, "
              f"tokens/s x{ours['tokens_per_s'] / r['tokens_per_s']:.2f}; "
              f"same tokens in {same}/{len(ours['tokens'])} rows")
    for name, r in results.items():
        if "log_probs" in r and name != "keras-gen" and "log_probs" in ours:
            print(f"{name} drift from float32: {drift(ours, r)}")
    if "time_to_first_token_long_ms" in ours:
        print(f"keras-gen first token: {ours['time_to_first_token_ms']:.1f} ms at max_length="
              f"{args.max_length}, {ours['time_to_first_token_long_ms']:.1f} ms at max_length="
              f"{ours['ttft_long_max_length']} (x{ours['time_to_first_token_long_ms'] / ours['time_to_first_token_ms']:.2f})")
    if "stream_overhead" in ours:
        print(f"keras-gen stream: {ours['stream_tokens_per_s']:.1f} tokens/s, "
              f"{100 * ours['stream_overhead']:+.1f}% time against generate")


def main(argv=None):
    args = parse_args(argv)
    if args.system:
        return run_system(args)
    systems = [s for s in args.systems.split(",") if s]
    if args.quantize:
        systems.insert(1, f"keras-gen-{args.quantize}")
    with tempfile.TemporaryDirectory() as folder:
        if args.model:
            args.weights = args.model
        else:
            args.weights = folder
            write_random_weights(args, folder)
        results = {}
        for system in systems:
            backend = "torch" if system.startswith("transformers") else args.backend
            print(f"running {system} ({backend}) ...", file=sys.stderr, flush=True)
            results[system] = child(args, system, backend)
    report(args, results)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"arguments": vars(args), "results": results}, file, indent=1)
    ours = results.get("keras-gen", {})
    peer = results.get("transformers", {})
    if args.sampler == "greedy" and "tokens" in ours and "tokens" in peer:
        if ours["tokens"] != peer["tokens"]:
            print("WARNING: keras-gen's greedy tokens differ from transformers'.")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
