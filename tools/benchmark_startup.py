"""Start-up benchmark: how long new processes take to their first tokens.

Each backend generates in fresh processes, one after another, sharing one
compilation cache that starts empty: the first process compiles, the later
ones find what the backends keep between processes (JAX's persistent
cache; torch Inductor's caches and the product forms keras-gen timed).
Each process reports its import, load, first call (`generate`, compiles
included) and a second call of the same shapes, and the whole process's
wall time.

    python tools/benchmark_startup.py                 # GPT-2 small, jax and torch
    python tools/benchmark_startup.py --model demo --backends jax,torch,tensorflow

Random GPT-2 small weights by default (as `tools/benchmark.py`), greedy,
one row of a 32-token prompt to `--max-length` 64.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BACKENDS = ("jax", "tensorflow", "torch")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        help="a model folder or a bundled preset such as `demo` (default: "
        "random GPT-2 small weights)",
    )
    parser.add_argument("--tiny", action="store_true", help="a tiny random model")
    parser.add_argument(
        "--backends",
        default="jax,torch",
        help="comma-separated, from " + ",".join(BACKENDS),
    )
    parser.add_argument("--processes", type=int, default=2, help="per backend, in turn")
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
        parser.error(
            f"--backends: {unknown or 'none'}; choose from {','.join(BACKENDS)}"
        )
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    if not 0 < args.prompt_length < args.max_length:
        parser.error("--prompt-length must be at least 1 and below --max-length")
    args.backends = backends
    return args


def worker(args):
    """One process's figures, as a JSON line on stdout."""
    start = time.perf_counter()
    import numpy as np

    import keras_gen

    imported = time.perf_counter()
    # A preset's name (the bundled `demo`) or a folder.
    lm = keras_gen.models.CausalLM.from_preset(args.weights)
    lm.compile(sampler="greedy")
    loaded = time.perf_counter()
    vocabulary = lm.backbone.vocabulary_size
    prompt = (np.arange(args.prompt_length)[None] * 7) % (vocabulary - 1) + 1
    kwargs = dict(max_length=args.max_length, stop_token_ids=None)
    lm.generate(prompt, **kwargs)
    first = time.perf_counter()
    lm.generate(prompt, **kwargs)
    second = time.perf_counter()
    figures = {
        "import_s": imported - start,
        "load_s": loaded - imported,
        "first_call_s": first - loaded,
        "second_call_s": second - first,
    }
    print(json.dumps(figures))


def run_process(args, backend, cache):
    command = [sys.executable, os.path.abspath(__file__), "--worker"]
    command += ["--weights", args.weights, "--prompt-length", str(args.prompt_length)]
    command += ["--max-length", str(args.max_length)]
    env = {**os.environ, "KERAS_BACKEND": backend, "KERAS_GEN_COMPILATION_CACHE": cache}
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    whole = time.perf_counter() - start
    if result.returncode:
        return {"error": result.stderr.strip().splitlines()[-1:]}
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    return {**figures, "process_s": whole}


def report(results):
    columns = ("import_s", "load_s", "first_call_s", "second_call_s", "process_s")
    print(
        "| backend | process | import s | load s | first call s | second call s | whole process s |"
    )
    print("|---|---|---|---|---|---|---|")
    for backend, processes in results.items():
        for number, figures in enumerate(processes, 1):
            if "error" in figures:
                print(f"| {backend} | {number} | failed: {figures['error']} |")
                continue
            cells = " | ".join(f"{figures[c]:.2f}" for c in columns)
            print(f"| {backend} | {number} | {cells} |")


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    import benchmark

    results = {}
    with tempfile.TemporaryDirectory() as folder:
        if args.model:
            args.weights = args.model
        else:
            args.weights = os.path.join(folder, "weights")
            benchmark.write_random_weights(args, args.weights)
        for backend in args.backends:
            cache = os.path.join(folder, f"cache-{backend}")
            results[backend] = [
                run_process(args, backend, cache) for _ in range(args.processes)
            ]
    report(results)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"arguments": vars(args), "results": results}, file, indent=1)
    failed = any("error" in f for processes in results.values() for f in processes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
