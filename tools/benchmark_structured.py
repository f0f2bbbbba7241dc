"""What structured output costs: constrained against free decoding, side by side.

GPT-2 small shapes (vocab 50257, 12 layers, hidden 768) with random
weights and a byte-level BPE vocabulary of 50257 tokens trained on this
Python's standard library sources (about 10 s, cached), batch 2, greedy,
a JSON schema (built in, or `--json-schema FILE`). Reported:

- the time to build the schema's automaton over the vocabulary (cold, with
  outlines-core) and to fetch it again (cached), and to pack the tables;
- milliseconds per decode step, free and constrained, for keras-gen and,
  when `outlines` is installed, for outlines on transformers (the peer:
  its logits processor masks on the host each step) on the same weights.

Steps are timed as `(time(N new tokens) - time(1 new token)) / (steps - 1)`
with `steps` the tokens the longest row generated, so rows that end early
(a JSON text is complete) do not flatter either side. The systems are
loaded and warmed up one at a time, then timed in alternating rounds; the
median of `--repeats` rounds is reported.

    KERAS_BACKEND=jax python tools/benchmark_structured.py
    python tools/benchmark_structured.py --json-schema schema.json --repeats 5
    python tools/benchmark_structured.py --tiny --repeats 1   # a smoke test
"""

import argparse
import glob
import json
import os
import statistics
import sys
import sysconfig
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
    vocabulary_size=512,
    num_layers=2,
    num_heads=2,
    hidden_dim=32,
    intermediate_dim=128,
    max_sequence_length=256,
)
END_OF_TEXT = "<|endoftext|>"
# Unbounded strings and arrays: a random model's rows run long, so that
# the steps measured are steady ones.
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 100000},
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "active": {"type": "boolean"},
    },
    "required": ["id", "name", "tags", "score", "active"],
}
PROMPT = "The record as JSON:"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json-schema", help="a JSON schema file (default: built in)")
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny model, for smoke tests"
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds")
    parser.add_argument("--no-peer", action="store_true", help="skip outlines")
    parser.add_argument("--json", help="write the results to this file")
    return parser.parse_args(argv)


def train_tokenizer(vocabulary_size, path):
    """A byte-level BPE of `vocabulary_size` tokens, trained once on this
    Python's standard library sources and kept at `path`."""
    import tokenizers
    from tokenizers import decoders
    from tokenizers import models
    from tokenizers import pre_tokenizers
    from tokenizers import trainers

    if os.path.isfile(path):
        return tokenizers.Tokenizer.from_file(path)
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(
        f
        for f in glob.glob(os.path.join(root, "**", "*.py"), recursive=True)
        if "site-packages" not in f
    )

    def texts():
        for name in files:
            with open(name, encoding="utf-8", errors="replace") as file:
                yield file.read()

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocabulary_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts(), trainer)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tokenizer.save(path)
    return tokenizer


def build_model(args, folder):
    """A random GPT-2 with the trained tokenizer, saved as a model folder."""
    import keras

    import keras_gen
    from keras_gen.tokenizers import Tokenizer

    config = TINY if args.tiny else GPT2_SMALL
    cache = os.path.join(os.path.expanduser("~"), ".cache", "keras-gen", "benchmark")
    raw = train_tokenizer(
        config["vocabulary_size"],
        os.path.join(cache, f"bpe-{config['vocabulary_size']}.json"),
    )
    end = raw.token_to_id(END_OF_TEXT)
    tokenizer = Tokenizer(raw, bos_token_id=end, eos_token_ids=[end])
    keras.utils.set_random_seed(0)
    backbone = keras_gen.models.GPT2Backbone(**config)
    rng = np.random.default_rng(0)
    for variable in backbone.weights:
        if not variable.path.endswith(("gamma", "beta", "bias")):
            variable.assign(rng.normal(0, 0.05, variable.shape).astype("float32"))
    lm = keras_gen.models.GPT2CausalLM(backbone, tokenizer=tokenizer)
    lm.save_pretrained(folder)
    return lm


def steps_timer(run):
    """`time(n) -> (seconds, steps)` of one run of `n` new tokens."""

    def time_it(n):
        started = time.perf_counter()
        steps = run(n)
        return time.perf_counter() - started, steps

    return time_it


def keras_gen_systems(args, lm, schema):
    from keras_gen.processors import JsonSchema

    prompts = [PROMPT] * args.batch

    def run(processors):
        def generate(n):
            record = lm.generate(
                prompts,
                processors=processors,
                max_new_tokens=n,
                do_sample=False,
                return_dict=True,
            )
            return max(len(ids) for ids in record.token_ids)

        return generate

    # Free rows never stop, as constrained ones do not until their text ends.
    free = run([])
    return {
        "keras-gen": steps_timer(lambda n: free(n)),
        "keras-gen + JsonSchema": steps_timer(run([JsonSchema(schema)])),
    }


def outlines_systems(args, folder, schema):
    import outlines
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    prompts = [PROMPT] * args.batch
    # Decode steps, counted as the model's forward calls (the prompt's
    # included, as for the other systems: n new tokens, n calls).
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    started = time.perf_counter()
    generator = outlines.Generator(
        outlines.from_transformers(model, tokenizer),
        outlines.types.JsonSchema(json.dumps(schema)),
    )
    build = time.perf_counter() - started

    def counted(run):
        def steps(n):
            calls[0] = 0
            with torch.no_grad():
                run(n)
            return calls[0]

        return steps

    def free(n):
        inputs = tokenizer(prompts, return_tensors="pt", padding=True)
        model.generate(
            **inputs,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=tokenizer.eos_token_id,
        )

    def constrained(n):
        generator.batch(prompts, max_new_tokens=n)

    systems = {
        "transformers": steps_timer(counted(free)),
        "outlines + transformers": steps_timer(counted(constrained)),
    }
    return systems, build


def build_times(lm, schema):
    """Seconds to build the schema's automaton cold and cached, and to pack."""
    from keras_gen.kernels import automaton as automaton_lib
    from keras_gen.kernels.constraint_tables import ConstraintTables
    from keras_gen.processors import JsonSchema

    pattern = JsonSchema(schema).pattern()
    size = lm.backbone.vocabulary_size
    automaton_lib._automata.clear()
    automaton_lib._vocabularies.clear()
    started = time.perf_counter()
    automaton = automaton_lib.Automaton.from_regex(pattern, lm.tokenizer, size)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    automaton_lib.Automaton.from_regex(pattern, lm.tokenizer, size)
    cached = time.perf_counter() - started
    started = time.perf_counter()
    tables = ConstraintTables([automaton], size)
    packed = time.perf_counter() - started
    table_bytes = sum(a.nbytes for a in tables.arrays.values())
    return {
        "automaton_cold_s": cold,
        "automaton_cached_s": cached,
        "pack_s": packed,
        "states": automaton.num_states,
        "transitions": len(automaton.transitions),
        "table_mb": table_bytes / 1e6,
    }


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    schema = SCHEMA
    if args.json_schema:
        with open(args.json_schema, encoding="utf-8") as file:
            schema = json.load(file)
    folder = tempfile.mkdtemp(prefix="keras-gen-structured-")
    lm = build_model(args, folder)
    results = {
        "backend": os.environ["KERAS_BACKEND"],
        "batch": args.batch,
        "new_tokens": args.new_tokens,
        **build_times(lm, schema),
    }
    systems = keras_gen_systems(args, lm, schema)
    if not args.no_peer:
        try:
            peers, results["outlines_build_s"] = outlines_systems(args, folder, schema)
            systems.update(peers)
        except ImportError as error:
            results["outlines_skipped"] = f"not installed ({error.name})"
    # Loaded above one at a time; each warmed up with the measured shapes.
    for name, timer in systems.items():
        timer(args.new_tokens)
        timer(1)
        print(f"warmed up: {name}", file=sys.stderr)
    per_step = {name: [] for name in systems}
    steps = {}
    for _ in range(args.repeats):
        for name, timer in systems.items():
            total, count = timer(args.new_tokens)
            first, _ = timer(1)
            steps[name] = count
            per_step[name].append((total - first) / max(count - 1, 1) * 1000)
    results["ms_per_step"] = {n: statistics.median(v) for n, v in per_step.items()}
    results["steps"] = steps
    report(results)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)
    return results


def report(results):
    print(
        f"backend {results['backend']}, batch {results['batch']}, "
        f"{results['new_tokens']} new tokens at most"
    )
    print(
        f"automaton: {results['states']} states, {results['transitions']} "
        f"transitions, tables {results['table_mb']:.1f} MB; built in "
        f"{results['automaton_cold_s'] * 1000:.0f} ms, cached "
        f"{results['automaton_cached_s'] * 1000:.2f} ms, packed in "
        f"{results['pack_s'] * 1000:.0f} ms"
    )
    if "outlines_build_s" in results:
        print(
            f"outlines: generator (index) built in "
            f"{results['outlines_build_s'] * 1000:.0f} ms"
        )
    if "outlines_skipped" in results:
        print(f"outlines: skipped, {results['outlines_skipped']}")
    times = results["ms_per_step"]
    for name, value in times.items():
        print(f"{name:28s} {value:8.2f} ms per step ({results['steps'][name]} steps)")
    for free, constrained in (
        ("keras-gen", "keras-gen + JsonSchema"),
        ("transformers", "outlines + transformers"),
    ):
        if free in times and constrained in times:
            print(f"{constrained}: {times[constrained] / times[free]:.3f}x {free}")


if __name__ == "__main__":
    main()
