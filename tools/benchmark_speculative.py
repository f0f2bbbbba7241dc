"""Speculative decoding: acceptance rate and speed-up against plain decoding.

A random GPT-2 shaped target (by default 12 layers, hidden 256, GPT-2's
vocabulary) generates greedily, plainly and with three drafts:

- `self`: the target drafts for itself (every proposal is accepted: the
  upper bound of the acceptance rate, and the cost of verifying);
- `truncated`: a draft made of the target's first `--draft-layers` layers
  (same embeddings and final norm);
- `lookup`: prompt lookup (`--ngram`) on a prompt that repeats itself.

    KERAS_BACKEND=jax python tools/benchmark_speculative.py
    python tools/benchmark_speculative.py --hidden 512 --new-tokens 256 --json out.json
    python tools/benchmark_speculative.py --tiny   # seconds: checks the tool runs

Reported per mode: first call (compile + run), median seconds of
`--repeats` runs, new tokens per second, acceptance (accepted / proposed
draft tokens) and speed-up over plain greedy on the same prompt. Each mode
checks that its tokens equal plain greedy's.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

MODES = ("self", "truncated", "lookup")
# `--tiny`: the smallest workload, for a check that the tool runs.
TINY = dict(
    layers=2, hidden=32, heads=2, vocabulary=300, prompt_length=16, new_tokens=16
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--layers", type=int, default=12, help="target layers")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--vocabulary", type=int, default=50257, help="vocabulary size")
    parser.add_argument(
        "--draft-layers", type=int, default=2, help="the truncated draft's layers"
    )
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--ngram", type=int, default=3, help="prompt lookup n-gram")
    parser.add_argument("--batch", type=int, default=1, help="rows")
    parser.add_argument("--prompt-length", type=int, default=32, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens generated")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per mode")
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated, of {MODES}"
    )
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help=f"the smallest workload ({TINY}, 1 repeat), to check the tool runs",
    )
    args = parser.parse_args(argv)
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        parser.error(f"--modes: {sorted(unknown)} are not among {MODES}")
    if args.tiny:
        for name, value in {**TINY, "repeats": 1}.items():
            setattr(args, name, value)
    return args


def build_models(args):
    import keras

    from keras_gen.models import GPT2Backbone
    from keras_gen.models import GPT2CausalLM

    keras.utils.set_random_seed(0)
    config = dict(
        vocabulary_size=args.vocabulary,
        num_heads=args.heads,
        hidden_dim=args.hidden,
        intermediate_dim=4 * args.hidden,
        max_sequence_length=1024,
    )
    target = GPT2Backbone(num_layers=args.layers, **config)
    draft = GPT2Backbone(num_layers=args.draft_layers, **config)
    # The draft is the target's first layers: copy by path within the model.
    sources = {v.path.split("/", 1)[1]: v for v in target.weights}
    for variable in draft.weights:
        variable.assign(sources[variable.path.split("/", 1)[1]])
    return GPT2CausalLM(target), GPT2CausalLM(draft)


def prompts(args, repeating):
    rng = np.random.default_rng(0)
    if not repeating:
        return rng.integers(
            0, args.vocabulary, (args.batch, args.prompt_length)
        ).tolist()
    # A prompt that repeats itself: a short phrase, four times over.
    phrase = rng.integers(0, args.vocabulary, (args.batch, args.prompt_length // 4))
    return np.tile(phrase, (1, 4)).tolist()


def measure(lm, inputs, args, **kwargs):
    started = time.perf_counter()
    record = lm.generate(
        inputs,
        max_new_tokens=args.new_tokens,
        stop_token_ids=None,
        return_dict=True,
        **kwargs,
    )
    first_call = time.perf_counter() - started
    times = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        lm.generate(
            inputs, max_new_tokens=args.new_tokens, stop_token_ids=None, **kwargs
        )
        times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    result = {
        "first_call_s": round(first_call, 2),
        "seconds": round(seconds, 3),
        "tokens_per_second": round(args.new_tokens * args.batch / seconds, 1),
        "token_ids": record.token_ids,
    }
    if record.draft_tokens is not None:
        result["acceptance"] = round(
            sum(record.accepted_tokens) / max(sum(record.draft_tokens), 1), 3
        )
    return result


def main(argv=None):
    args = parse_args(argv)
    import keras

    target, draft = build_models(args)
    settings = {
        "self": (False, dict(draft_model=target, num_speculative_tokens=args.k)),
        "truncated": (False, dict(draft_model=draft, num_speculative_tokens=args.k)),
        "lookup": (
            True,
            dict(prompt_lookup_ngram=args.ngram, num_speculative_tokens=args.k),
        ),
    }
    plain = {}
    results = {"backend": keras.config.backend(), "args": vars(args), "modes": {}}
    for mode in args.modes.split(","):
        repeating, kwargs = settings[mode]
        inputs = prompts(args, repeating)
        if repeating not in plain:
            plain[repeating] = measure(target, inputs, args)
            name = "plain (repeating prompt)" if repeating else "plain"
            results["modes"][name] = plain[repeating]
            print(name, {k: v for k, v in plain[repeating].items() if k != "token_ids"})
        result = measure(target, inputs, args, **kwargs)
        result["same_tokens_as_plain"] = (
            result["token_ids"] == plain[repeating]["token_ids"]
        )
        result["speed_up"] = round(plain[repeating]["seconds"] / result["seconds"], 2)
        results["modes"][mode] = result
        print(mode, {k: v for k, v in result.items() if k != "token_ids"})
    for result in results["modes"].values():
        result.pop("token_ids")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    differ = [
        mode
        for mode, result in results["modes"].items()
        if result.get("same_tokens_as_plain") is False
    ]
    if differ:
        print(f"failed: {differ} did not give plain greedy's tokens", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.exit(main())
