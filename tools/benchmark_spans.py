"""What a long `max_length` costs a stream that stops early.

Streams 100 tokens after a 32-token prompt (batch 1, GPT-2 small shapes,
random weights) at `max_length=2048` and at 256, in alternating rounds
after a warm-up that compiles every span, and prints the medians (ms per
token) and their ratio. The backend is `KERAS_BACKEND`'s:

    KERAS_BACKEND=jax python tools/benchmark_spans.py --rounds 3
"""

import argparse
import os
import statistics
import sys
import time

import keras
import numpy as np

import keras_gen

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark  # noqa: E402  (GPT-2 small's shapes)

# With 2,048 learned positions, the shapes otherwise the same.
GPT2_SMALL = {**benchmark.GPT2_SMALL, "max_sequence_length": 2048}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=100)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    lm = keras_gen.models.GPT2CausalLM(keras_gen.models.GPT2Backbone(**GPT2_SMALL))
    prompt = [np.random.default_rng(0).integers(0, 50257, 32).tolist()]

    def per_token(max_length):
        began, count = time.perf_counter(), 0
        stream = lm.stream(
            prompt, max_length=max_length, stop_token_ids=None, stream_chunk_size=8
        )
        for chunk in stream:
            count += len(chunk.token_ids[0])
            if count >= args.tokens:
                break
        stream.close()
        return (time.perf_counter() - began) / count * 1000

    lengths = (256, 2048)
    for max_length in lengths * 2:  # compiles every span
        per_token(max_length)
    times = {max_length: [] for max_length in lengths}
    for _ in range(args.rounds):
        for max_length in lengths:
            times[max_length].append(per_token(max_length))
    medians = {n: statistics.median(t) for n, t in times.items()}
    print(
        f"{keras.config.backend()}: ms per token "
        + ", ".join(f"max_length {n}: {t:.2f}" for n, t in medians.items())
        + f"; 2048 / 256: {medians[2048] / medians[256]:.3f}"
    )


if __name__ == "__main__":
    main()
