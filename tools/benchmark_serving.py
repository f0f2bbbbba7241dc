"""Serving benchmark: streamed requests against an OpenAI-compatible server.

Starts `keras-gen serve` on a free loopback port (or takes `--url` of any
OpenAI-compatible server, so that the same workload can be pointed at
another engine), sends `--requests` streamed completions with Poisson
arrivals at `--rate` requests/s (`inf`: all at once), bounded in count and
in time, then sends the same workload one request at a time (with
`cache_prompt: false`: its prompts are not found in the prefix cache, as
the concurrent run's were not) for the batching gain. Prompts are random token ids of seeded lengths; `max_tokens`
is seeded too and `ignore_eos` makes every request run to its length.
Settings come from `--mix`: `greedy`, `sample` (seeded, temperature 0.5 to
1.2), `top_k`, `top_p` (sampled with those filters), `penalties` (sampled
with random repetition, presence and frequency penalties and a logit bias),
`lookup` (greedy or sampled, with prompt lookup of 1 to 3 tokens: the
server speculates), one drawn per request.

    KERAS_BACKEND=jax python tools/benchmark_serving.py            # demo model
    python tools/benchmark_serving.py --model gpt2-small --requests 16 --max-tokens 64
    python tools/benchmark_serving.py --scenario short-among-long --model gpt2-small
    python tools/benchmark_serving.py --url http://127.0.0.1:8000 --model-name demo

Scenarios: `load` (the above), `short-among-long` (the time to first token
of a short request on an idle server and while `--long` long ones run, in
alternating rounds), `soak` (the load workload only, for many requests:
the server's RSS and compilations after warm-up and at the end), `lone`
(no server: one greedy request through an `Engine` and through
`lm.stream`, in alternating rounds, for the engine's cost per token),
`busy` (no server: `--max-batch-size` greedy requests of `--max-tokens`
decoding together in an `Engine`, against `lm.generate`'s step at that
batch, in alternating rounds),
`shared-prefix` (a `--prefix`-token system prompt shared by every request,
then a 20-token question: one request's time to first token with the
prefix cached and with `cache_prompt: false`, in alternating rounds, then
`--requests` such requests at once, both ways) and `long-prompt` (a
`--prefix`-token prompt arriving while `--long` requests stream: their
inter-token latency p99 before it and until its first token, on a server
whose prefill pauses decoding for `--prefill-pause` decode chunks (`1,4`:
one server each) and on one that prefills prompts whole), and `ngram` (one
greedy request of `--max-tokens` at a time, with `prompt_lookup_ngram` and
without, in alternating rounds, on a 64-token prompt that repeats a phrase
and on one that does not, then `--max-batch-size` of each at once, both ways, on a
server started with `--num-speculative-tokens`; its acceptance rate), and
`draft` (no server: one greedy request of `--max-tokens` at a time through
an `Engine` with a draft model, the model's first `--draft-layers` layers,
and through one without, in alternating rounds, then `--max-batch-size`
at once each way; the acceptance rate, and whether the tokens agree).

    python tools/benchmark_serving.py --scenario shared-prefix --model gpt2-small \
        --max-length 2048 --prefix 1000 --requests 32
    python tools/benchmark_serving.py --scenario long-prompt --model gpt2-small \
        --max-length 2048 --prefix 2000
    python tools/benchmark_serving.py --scenario ngram --model gpt2-small \
        --max-tokens 128
    python tools/benchmark_serving.py --scenario draft --model gpt2-small-repeats \
        --draft-layers 2 --max-tokens 128

Reported: requests/s, output tokens/s, time to first token and inter-token
latency p50/p90/p99 (a chunk of k tokens counts k gaps of its delay / k),
the batching gain (sequential time / concurrent time), and, when this tool
started the server, its RSS and `keras_gen_program_compilations_total`.
`--json PATH` writes everything.
"""

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark  # noqa: E402  (random GPT-2 weights, the same as tools/benchmark.py)

MIXES = ("greedy", "sample", "top_k", "top_p", "penalties", "lookup")
SCENARIOS = (
    "load",
    "short-among-long",
    "soak",
    "lone",
    "busy",
    "shared-prefix",
    "long-prompt",
    "ngram",
    "draft",
)
PROMPT_TOKENS = (1, 90)  # token ids every model here has


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="demo",
        help="demo, gpt2-small, gpt2-small-repeats (Keras' initialisation: its "
        "greedy text soon repeats itself) or tiny (random weights), or a model "
        "folder",
    )
    parser.add_argument(
        "--url", help="an OpenAI-compatible server to use instead of starting one"
    )
    parser.add_argument(
        "--model-name", help="the model name requests carry (default: --model)"
    )
    parser.add_argument(
        "--backend",
        default=os.environ.get("KERAS_BACKEND", "jax"),
        choices=["jax", "tensorflow", "torch"],
    )
    parser.add_argument(
        "--scenario",
        default="load",
        choices=SCENARIOS,
    )
    parser.add_argument(
        "--prefix",
        type=int,
        default=1000,
        help="shared-prefix: the system prompt's tokens; long-prompt: the long one's",
    )
    parser.add_argument(
        "--prefill-chunk-tokens", type=int, help="the server's (default: its own)"
    )
    parser.add_argument(
        "--prefill-pause",
        help="the server's (default: its own; long-prompt: X[,X...], one server "
        "each, and one with inf: prompts prefilled whole)",
    )
    parser.add_argument(
        "--num-speculative-tokens",
        type=int,
        help="the server's (default: none; ngram and the lookup mix: 4)",
    )
    parser.add_argument(
        "--ngram", type=int, default=3, help="ngram: the requests' prompt_lookup_ngram"
    )
    parser.add_argument(
        "--draft-model",
        help="a model folder or preset the server drafts with for every "
        "request (not with the lookup mix)",
    )
    parser.add_argument(
        "--draft-layers",
        type=int,
        default=1,
        help="draft: the draft model is the model's first this many layers",
    )
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument(
        "--rate", type=float, default=math.inf, help="requests/s (default: all at once)"
    )
    parser.add_argument(
        "--prompt-lengths", default="16:64", help="MIN:MAX prompt tokens"
    )
    parser.add_argument("--max-tokens", default="64", help="N or MIN:MAX new tokens")
    parser.add_argument(
        "--mix", default="greedy,sample", help=f"from {','.join(MIXES)}"
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=64,
        help="requests in flight at most (client threads)",
    )
    parser.add_argument(
        "--long", type=int, default=7, help="short-among-long: long requests"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="short-among-long: rounds"
    )
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the sequential run (load) or the whole-prompt server (long-prompt)",
    )
    parser.add_argument(
        "--max-seconds", type=float, default=1800, help="a bound on each run"
    )
    parser.add_argument("--startup-seconds", type=float, default=900)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    args.mix = args.mix.split(",")
    unknown = set(args.mix) - set(MIXES)
    if unknown:
        parser.error(f"--mix: unknown {sorted(unknown)}; choose from {list(MIXES)}")
    args.model_name = args.model_name or args.model
    try:
        pauses = args.prefill_pause
        args.pauses = (
            [None] if pauses is None else [float(x) for x in pauses.split(",")]
        )
    except ValueError:
        parser.error("--prefill-pause: X or, for long-prompt, X,X,...")
    if len(args.pauses) > 1 and args.scenario != "long-prompt":
        parser.error("--prefill-pause: several values only for long-prompt")
    args.prefill_pause = args.pauses[0]
    speculates = args.scenario in ("ngram", "draft") or "lookup" in args.mix
    if speculates and args.num_speculative_tokens is None:
        args.num_speculative_tokens = 4
    return args


def span(text):
    low, _, high = text.partition(":")
    return int(low), int(high or low)


# The workload.


def workload(args, count, seed):
    """`count` request bodies and arrival offsets, all from `seed`."""
    rng = np.random.default_rng(seed)
    lengths, new_tokens = span(args.prompt_lengths), span(args.max_tokens)
    gaps = (
        np.zeros(count)
        if math.isinf(args.rate)
        else rng.exponential(1 / args.rate, count)
    )
    bodies = []
    for i in range(count):
        length = int(rng.integers(lengths[0], lengths[1] + 1))
        body = {
            "model": args.model_name,
            "prompt": [int(t) for t in rng.integers(*PROMPT_TOKENS, length)],
            "max_tokens": int(rng.integers(new_tokens[0], new_tokens[1] + 1)),
            "ignore_eos": True,
            "logprobs": 0,  # each event then lists its tokens
            "stream": True,
        }
        kind = args.mix[int(rng.integers(len(args.mix)))]
        if kind == "greedy" or (kind == "lookup" and rng.integers(2)):
            body["temperature"] = 0
        else:
            body.update(temperature=round(float(rng.uniform(0.5, 1.2)), 2), seed=i)
        if kind == "lookup":
            body["prompt_lookup_ngram"] = int(rng.integers(1, 4))
        if kind == "top_k":
            body["top_k"] = int(rng.choice([5, 20, 40]))
        if kind == "top_p":
            body["top_p"] = float(rng.choice([0.8, 0.9, 0.95]))
        if kind == "penalties":
            body.update(
                repetition_penalty=round(float(rng.uniform(1.0, 1.5)), 2),
                presence_penalty=round(float(rng.uniform(-1, 1)), 2),
                frequency_penalty=round(float(rng.uniform(-1, 1)), 2),
                logit_bias={str(int(rng.integers(*PROMPT_TOKENS))): -100},
            )
        bodies.append(body)
    return bodies, np.cumsum(gaps) - gaps[0]


def stream(client, body, deadline, first_token=None):
    """Send one streamed request; its timings and token count. Sets the
    `threading.Event` `first_token`, if given, when tokens first arrive."""
    started = time.perf_counter()
    arrivals = []  # (time, tokens) per event with tokens
    with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            return {"error": f"{response.status_code}: {response.read()[:200]!r}"}
        for line in response.iter_lines():
            if not line.startswith("data: {") or time.perf_counter() > deadline:
                continue
            choices = json.loads(line[len("data: ") :]).get("choices") or []
            tokens = sum(
                len((c.get("logprobs") or {}).get("tokens") or []) for c in choices
            )
            if tokens:
                arrivals.append((time.perf_counter(), tokens))
                if first_token is not None:
                    first_token.set()
    if not arrivals:
        return {"error": "no tokens"}
    return timings(started, arrivals)


def timings(started, arrivals):
    """A stream's time to first token and gaps from its `(time, tokens)`
    arrivals."""
    gaps, previous = [], arrivals[0][0]
    for moment, tokens in arrivals[1:]:
        gaps += [(moment - previous) / tokens] * tokens
        previous = moment
    return {
        "ttft": arrivals[0][0] - started,
        "itl": gaps,
        "tokens": sum(tokens for _, tokens in arrivals),
        "latency": time.perf_counter() - started,
        "arrivals": arrivals,
    }


def run_load(client, bodies, offsets, concurrency, max_seconds):
    """Send `bodies` at `offsets` (at most `concurrency` at once)."""
    deadline = time.perf_counter() + max_seconds
    started = time.perf_counter()

    def send(i):
        delay = started + offsets[i] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if time.perf_counter() > deadline:
            return {"error": "not sent: --max-seconds"}
        return stream(client, bodies[i], deadline)

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        records = list(pool.map(send, range(len(bodies))))
    return summarize(records, time.perf_counter() - started)


def percentiles(values):
    if not values:
        return None
    p50, p90, p99 = np.percentile(values, [50, 90, 99]) * 1000
    return {"p50_ms": round(p50, 2), "p90_ms": round(p90, 2), "p99_ms": round(p99, 2)}


def summarize(records, duration):
    done = [r for r in records if "error" not in r]
    tokens = sum(r["tokens"] for r in done)
    return {
        "requests": len(records),
        "completed": len(done),
        "errors": sorted({r["error"] for r in records if "error" in r}),
        "duration_s": round(duration, 3),
        "requests_per_s": round(len(done) / duration, 3),
        "output_tokens_per_s": round(tokens / duration, 2),
        "time_to_first_token": percentiles([r["ttft"] for r in done]),
        "inter_token_latency": percentiles([g for r in done for g in r["itl"]]),
    }


# The server.


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_folder(args, folder):
    """`--model` as `keras-gen serve` takes it (random weights written)."""
    if args.model not in ("gpt2-small", "gpt2-small-repeats", "tiny"):
        return args.model
    import tokenizers

    from keras_gen.tokenizers.tokenizer import Tokenizer

    benchmark.write_random_weights(
        argparse.Namespace(
            tiny=args.model == "tiny",
            context=args.max_length,
            keras_init=args.model == "gpt2-small-repeats",
        ),
        folder,
    )
    size = (benchmark.TINY if args.model == "tiny" else benchmark.GPT2_SMALL)[
        "vocabulary_size"
    ]
    # A word-level tokenizer with a token per id: the server decodes any id.
    words = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({f"t{i}": i for i in range(size)}, unk_token="t0")
    )
    words.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    Tokenizer(words, eos_token_ids=[size - 1]).save_pretrained(folder)
    return folder


@contextlib.contextmanager
def server(args):
    """The base URL to send to, and the server's process (or `None`)."""
    if args.url:
        yield args.url.rstrip("/"), None
        return
    import httpx

    with tempfile.TemporaryDirectory() as folder:
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "keras_gen",
            "--backend",
            args.backend,
            "serve",
            "--model",
            model_folder(args, folder),
            "--model-name",
            args.model_name,
            "--port",
            str(port),
            "--max-batch-size",
            str(args.max_batch_size),
            "--max-length",
            str(args.max_length),
            # Timed requests run the compiled step (torch's background
            # warm-up would serve the first ones eagerly).
            "--warm-up",
            "wait",
        ]
        if args.prefill_chunk_tokens:
            command += ["--prefill-chunk-tokens", str(args.prefill_chunk_tokens)]
        if args.prefill_pause is not None:
            command += ["--prefill-pause", str(args.prefill_pause)]
        if args.num_speculative_tokens:
            command += ["--num-speculative-tokens", str(args.num_speculative_tokens)]
        if args.draft_model:
            command += ["--draft-model", args.draft_model]
        env = {**os.environ, "KERAS_BACKEND": args.backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + args.startup_seconds
            while True:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"the server exited: {process.stderr.read()[-2000:]}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not start in --startup-seconds")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                        break
                time.sleep(0.5)
            yield url, process
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def rss_mb(process):
    if process is None:
        return None
    with open(f"/proc/{process.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)


def server_metric(client, name):
    """A sample of the server's `/metrics`, or `None` (no such metric)."""
    response = client.get("/metrics")
    if response.status_code != 200:
        return None
    return metric_value(response.text, name)


def metric_value(text, name):
    """A sample of metrics in Prometheus' text format, or `None`."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return None


def compilations(client):
    return server_metric(client, "keras_gen_program_compilations_total")


def timed_short(client, body, deadline):
    """A request's time to first token, seen by the client and (where the
    server has the metric) by the server: its TTFT histogram's sum moves by
    this request's alone while the others already streamed their first."""
    name = "keras_gen_time_to_first_token_seconds_sum"
    before = server_metric(client, name)
    ttft = stream(client, body, deadline)["ttft"]
    after = server_metric(client, name)
    return ttft, None if before is None else after - before


def server_state(client, process):
    return {"rss_mb": rss_mb(process), "compilations": compilations(client)}


# The scenarios.


def warm_up(client, args):
    """Requests of the workload's shapes, so that no compile is timed."""
    bodies, _ = workload(args, 4, args.seed + 1)
    run_load(client, bodies, np.zeros(len(bodies)), len(bodies), args.max_seconds)
    run_load(client, bodies[:1], np.zeros(1), 1, args.max_seconds)


def scenario_load(client, process, args):
    warm_up(client, args)
    bodies, offsets = workload(args, args.requests, args.seed)
    before = server_state(client, process)
    concurrency = min(len(bodies), args.max_concurrency)
    results = {
        "concurrent": run_load(client, bodies, offsets, concurrency, args.max_seconds)
    }
    if not args.no_baseline and args.scenario == "load":
        # The same requests, one at a time, with the same cold prefix
        # cache as the concurrent run had: no prompt is found there.
        uncached = [{**body, "cache_prompt": False} for body in bodies]
        results["sequential"] = run_load(
            client, uncached, np.zeros(len(bodies)), 1, args.max_seconds
        )
        results["batching_gain"] = round(
            results["sequential"]["duration_s"] / results["concurrent"]["duration_s"], 2
        )
    results["server_before"], results["server_after"] = (
        before,
        server_state(client, process),
    )
    return results


def scenario_short_among_long(client, process, args):
    warm_up(client, args)
    short, _ = workload(
        argparse.Namespace(**{**vars(args), "max_tokens": "8"}), 1, args.seed
    )
    longs, _ = workload(
        argparse.Namespace(**{**vars(args), "max_tokens": str(args.max_length // 2)}),
        args.long,
        args.seed + 2,
    )
    deadline = time.perf_counter() + args.max_seconds
    idle, busy = [], []
    for _ in range(args.rounds):
        idle.append(timed_short(client, short[0], deadline))
        with concurrent.futures.ThreadPoolExecutor(args.long) as pool:
            started = [threading.Event() for _ in longs]
            running = [
                pool.submit(stream, client, body, deadline, event)
                for body, event in zip(longs, started)
            ]
            for event in started:  # every long one is decoding
                event.wait(args.max_seconds)
            time.sleep(0.1)
            busy.append(timed_short(client, short[0], deadline))
            for future in running:
                future.result()

    def ms(times):
        return [None if t is None else round(t * 1000, 1) for t in times]

    results = {
        "idle_ttft_ms": ms(t for t, _ in idle),
        "busy_ttft_ms": ms(t for t, _ in busy),
        "busy_over_idle": ratio([t for t, _ in busy], [t for t, _ in idle]),
    }
    if idle[0][1] is not None:
        results.update(
            server_idle_ttft_ms=ms(t for _, t in idle),
            server_busy_ttft_ms=ms(t for _, t in busy),
            server_busy_over_idle=ratio([t for _, t in busy], [t for _, t in idle]),
        )
    return results


def random_ids(seed, count):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(*PROMPT_TOKENS, count)]


def scenario_shared_prefix(client, process, args):
    system = random_ids(args.seed, args.prefix)
    max_tokens = span(args.max_tokens)[0]

    def body(question, cache_prompt):
        return {
            "model": args.model_name,
            "prompt": system + random_ids(10_000 + question, 20),
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "logprobs": 0,
            "temperature": 0,
            "stream": True,
            "cache_prompt": cache_prompt,
        }

    deadline = time.perf_counter() + args.max_seconds
    for cache_prompt in (True, False):  # the prefix cached, programs built
        stream(client, body(0, cache_prompt), deadline)
    ttft = {True: [], False: []}
    for i in range(args.rounds):
        for cache_prompt in (False, True):
            ttft[cache_prompt].append(
                stream(client, body(1 + 2 * i + cache_prompt, cache_prompt), deadline)[
                    "ttft"
                ]
            )
    loads = {}
    for cache_prompt in (False, True):
        bodies = [body(100 + i, cache_prompt) for i in range(args.requests)]
        loads[cache_prompt] = run_load(
            client, bodies, np.zeros(len(bodies)), len(bodies), args.max_seconds
        )
    return {
        "ttft_ms_cached": [round(t * 1000, 1) for t in ttft[True]],
        "ttft_ms_uncached": [round(t * 1000, 1) for t in ttft[False]],
        "ttft_cached_over_uncached": ratio(ttft[True], ttft[False]),
        "concurrent_cached": loads[True],
        "concurrent_uncached": loads[False],
        "throughput_gain": round(
            loads[True]["output_tokens_per_s"] / loads[False]["output_tokens_per_s"], 2
        ),
        "prefix_cache_hits": server_metric(client, "keras_gen_prefix_cache_hits_total"),
        "server": server_state(client, process),
    }


def scenario_long_prompt(client, process, args):
    """`--long` streams; after a second of them alone, a long prompt comes."""
    streams = [
        {
            "model": args.model_name,
            "prompt": random_ids(i, 16),
            "max_tokens": args.max_length // 2,
            "ignore_eos": True,
            "logprobs": 0,
            "temperature": 0,
            "stream": True,
        }
        for i in range(args.long)
    ]
    long = {**streams[0], "prompt": random_ids(99, args.prefix), "max_tokens": 4}
    deadline = time.perf_counter() + args.max_seconds
    stream(client, long, deadline)  # programs built
    for body in streams:
        stream(client, {**body, "max_tokens": 4}, deadline)
    with concurrent.futures.ThreadPoolExecutor(args.long) as pool:
        started = [threading.Event() for _ in streams]
        running = [
            pool.submit(stream, client, body, deadline, event)
            for body, event in zip(streams, started)
        ]
        for event in started:
            event.wait(args.max_seconds)
        time.sleep(1.0)
        arrived = time.perf_counter()
        # Another long prompt each time: no cached prefix.
        long["prompt"] = random_ids(int(arrived), args.prefix)
        first = arrived + stream(client, long, deadline)["ttft"]
        records = [future.result() for future in running]

    def gaps(low, high):
        found = []
        for record in records:
            moments = record["arrivals"]
            for (before, _), (moment, tokens) in zip(moments, moments[1:]):
                if low <= moment < high:
                    found += [(moment - before) / tokens] * tokens
        return found

    idle, busy = gaps(arrived - 1.0, arrived), gaps(arrived, first + 0.05)
    return {
        "long_prompt_ttft_ms": round((first - arrived) * 1000, 1),
        "idle_itl": percentiles(idle),
        "busy_itl": percentiles(busy),
        "p99_busy_over_idle": round(
            float(np.percentile(busy, 99) / np.percentile(idle, 99)), 2
        ),
        "server": server_state(client, process),
    }


def scenario_ngram(client, process, args):
    """Prompt lookup against plain decoding, one request at a time and
    `--max-batch-size` at once, on repeating and on random prompts."""
    max_tokens = span(args.max_tokens)[1]
    length = min(64, args.max_length - max_tokens)
    phrase = random_ids(args.seed, 12)
    prompts = {
        "repeating": (phrase * 8)[:length],
        "random": random_ids(args.seed + 1, length),
    }

    def body(prompt, ngram):
        return {
            "model": args.model_name,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "logprobs": 0,
            "temperature": 0,
            "stream": True,
            "prompt_lookup_ngram": ngram,
        }

    deadline = time.perf_counter() + args.max_seconds
    results = {}
    for kind, prompt in prompts.items():
        for ngram in (None, args.ngram):  # programs built, timings warm
            stream(client, body(prompt, ngram), deadline)
        speed = {None: [], args.ngram: []}
        drafted = server_metric(client, "keras_gen_speculative_draft_tokens_total")
        accepted = server_metric(client, "keras_gen_speculative_accepted_tokens_total")
        for _ in range(args.rounds):
            for ngram in speed:
                record = stream(client, body(prompt, ngram), deadline)
                if "error" in record:
                    raise RuntimeError(f"a request failed: {record['error']}")
                speed[ngram].append(record["tokens"] / record["latency"])
        drafted = (
            server_metric(client, "keras_gen_speculative_draft_tokens_total") - drafted
        )
        accepted = (
            server_metric(client, "keras_gen_speculative_accepted_tokens_total")
            - accepted
        )
        loads = {}
        for ngram in speed:
            bodies = [body(prompt, ngram)] * args.max_batch_size
            loads[ngram] = run_load(
                client, bodies, np.zeros(len(bodies)), len(bodies), args.max_seconds
            )
        results[kind] = {
            "lone_tokens_per_s_plain": [round(v, 1) for v in speed[None]],
            "lone_tokens_per_s_lookup": [round(v, 1) for v in speed[args.ngram]],
            "lone_speedup": ratio(speed[args.ngram], speed[None]),
            "acceptance": round(accepted / max(drafted, 1), 3),
            "concurrent_plain": loads[None],
            "concurrent_lookup": loads[args.ngram],
            "concurrent_speedup": round(
                loads[args.ngram]["output_tokens_per_s"]
                / loads[None]["output_tokens_per_s"],
                2,
            ),
        }
    results["server"] = server_state(client, process)
    return results


def ratio(busy, idle):
    return round(statistics.median(busy) / statistics.median(idle), 2)


def scenario_lone(args):
    """Inter-token latency of one request: `Engine` against `lm.stream`."""
    os.environ["KERAS_BACKEND"] = args.backend
    from keras_gen.cli import load_model
    from keras_gen.serving import Engine

    with tempfile.TemporaryDirectory() as folder:
        lm = load_model(model_folder(args, folder))
    (body,), _ = workload(
        argparse.Namespace(**{**vars(args), "mix": ["greedy"]}), 1, args.seed
    )
    options = dict(max_new_tokens=body["max_tokens"], temperature=0, stop_token_ids=[])

    def per_token(chunks):
        """Seconds per token after the first chunk's."""
        arrivals = []
        for chunk in chunks:
            if chunk.token_ids[0]:
                arrivals.append((time.perf_counter(), len(chunk.token_ids[0])))
        tokens = sum(n for _, n in arrivals[1:])
        return (arrivals[-1][0] - arrivals[0][0]) / tokens

    with Engine(
        lm, max_batch_size=args.max_batch_size, max_length=args.max_length
    ) as engine:
        engine.warm_up()
        runs = {
            "stream": lambda: lm.stream(body["prompt"], **options),
            "engine": lambda: engine.submit(body["prompt"], **options),
        }
        for run in runs.values():  # warm-up with the measured shape
            per_token(run())
        times = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                times[name].append(per_token(run()))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "stream_itl_ms": [round(t * 1000, 2) for t in times["stream"]],
        "engine_itl_ms": [round(t * 1000, 2) for t in times["engine"]],
        "engine_over_stream": round(medians["engine"] / medians["stream"], 3),
    }


def scenario_busy(args):
    """Inter-token latency of `--max-batch-size` greedy requests decoding
    together in an `Engine`, against `lm.generate`'s step at that batch."""
    os.environ["KERAS_BACKEND"] = args.backend
    from keras_gen.cli import load_model
    from keras_gen.serving import Engine

    with tempfile.TemporaryDirectory() as folder:
        lm = load_model(model_folder(args, folder))
    rng = np.random.default_rng(args.seed)
    batch, new = args.max_batch_size, span(args.max_tokens)[1]
    prompts = rng.integers(*PROMPT_TOKENS, (batch, 32)).tolist()
    options = dict(temperature=0, stop_token_ids=[])

    def generate_step():
        """Seconds per step: `new` tokens less one, over `new - 1`, each the
        fastest of five calls taken in alternation (on a busy machine one slow
        call, or a few steps of a tiny model, made the difference negative)."""
        calls = {new: [], 1: []}
        for _ in range(5):
            for count, times in calls.items():
                started = time.perf_counter()
                lm.generate(prompts, max_new_tokens=count, **options)
                times.append(time.perf_counter() - started)
        return (min(calls[new]) - min(calls[1])) / (new - 1)

    def engine_step(engine):
        """Seconds per token of each request once all of them run."""
        handles = [engine.submit(p, max_new_tokens=new, **options) for p in prompts]
        arrivals = []  # (moment, tokens) of every chunk, all requests

        def drain(handle):
            for chunk in handle:
                if chunk.token_ids[0]:
                    arrivals.append((time.perf_counter(), len(chunk.token_ids[0])))

        threads = [threading.Thread(target=drain, args=(h,)) for h in handles]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        arrivals.sort()
        first = arrivals[batch - 1][0]  # every request has its first token
        tokens = sum(n for moment, n in arrivals if moment > first) / batch
        return (arrivals[-1][0] - first) / tokens

    with Engine(lm, max_batch_size=batch, max_length=args.max_length) as engine:
        engine.warm_up()
        runs = {"generate": generate_step, "engine": lambda: engine_step(engine)}
        for run in runs.values():  # warm-up with the measured shapes
            run()
        times = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                times[name].append(run())
    medians = {name: statistics.median(values) for name, values in times.items()}
    step = medians["generate"]
    return {
        "generate_step_ms": [round(t * 1000, 2) for t in times["generate"]],
        "engine_itl_ms": [round(t * 1000, 2) for t in times["engine"]],
        # None: the step was lost in the machine's noise (a difference of
        # two calls came out at or below zero).
        "engine_over_generate": round(medians["engine"] / step, 3)
        if step > 0
        else None,
    }


def early_exit(lm, layers):
    """A draft `CausalLM`: `lm`'s first `layers` layers, with its embeddings,
    final norm and head (its weights shared by copy)."""
    backbone = lm.backbone
    draft = type(backbone).from_config(
        {**backbone.get_config(), "num_layers": layers, "name": "draft"}
    )
    ours = {w.path.split("/", 1)[1]: w for w in backbone.weights}
    for weight in draft.weights:
        weight.assign(ours[weight.path.split("/", 1)[1]])
    return type(lm)(draft, tokenizer=lm.tokenizer)


def scenario_draft(args):
    """A draft model (the model's first `--draft-layers` layers) in the
    `Engine` against the engine without one: one greedy request at a time
    in alternating rounds, then `--max-batch-size` at once."""
    os.environ["KERAS_BACKEND"] = args.backend
    from keras_gen.cli import load_model
    from keras_gen.serving import Engine

    with tempfile.TemporaryDirectory() as folder:
        lm = load_model(model_folder(args, folder))
    draft = early_exit(lm, args.draft_layers)
    new = span(args.max_tokens)[1]
    rng = np.random.default_rng(args.seed)
    prompts = rng.integers(*PROMPT_TOKENS, (args.max_batch_size, 32)).tolist()
    options = dict(max_new_tokens=new, temperature=0, stop_token_ids=[])
    engines = {
        "plain": Engine(
            lm, max_batch_size=args.max_batch_size, max_length=args.max_length
        ),
        "draft": Engine(
            lm,
            max_batch_size=args.max_batch_size,
            max_length=args.max_length,
            draft_model=draft,
            num_speculative_tokens=args.num_speculative_tokens,
        ),
    }

    def tokens_per_s(engine, count):
        started = time.perf_counter()
        handles = [engine.submit(p, **options) for p in prompts[:count]]
        records = [handle.result() for handle in handles]
        return sum(len(r.token_ids[0]) for r in records) / (
            time.perf_counter() - started
        ), records

    try:
        for engine in engines.values():
            engine.warm_up()
            tokens_per_s(engine, 1)
        tokens = {}
        speed = {name: [] for name in engines}
        for _ in range(args.rounds):
            for name, engine in engines.items():
                rate, records = tokens_per_s(engine, 1)
                speed[name].append(rate)
                tokens[name] = records[0].token_ids
        same = tokens["plain"] == tokens["draft"]
        text = engines["draft"].metrics.text()
        drafted, accepted = (
            metric_value(text, f"keras_gen_speculative_{name}_tokens_total")
            for name in ("draft", "accepted")
        )
        batch = {
            name: tokens_per_s(engine, args.max_batch_size)[0]
            for name, engine in engines.items()
        }
    finally:
        for engine in engines.values():
            engine.close()
    return {
        "lone_tokens_per_s_plain": [round(v, 1) for v in speed["plain"]],
        "lone_tokens_per_s_draft": [round(v, 1) for v in speed["draft"]],
        "lone_speedup": ratio(speed["draft"], speed["plain"]),
        "acceptance": round(accepted / max(drafted, 1), 3),
        "same_tokens": same,
        "concurrent_tokens_per_s_plain": round(batch["plain"], 1),
        "concurrent_tokens_per_s_draft": round(batch["draft"], 1),
        "concurrent_speedup": round(batch["draft"] / batch["plain"], 2),
    }


def report(args, results):
    print(f"model {args.model}, backend {args.backend}, scenario {args.scenario}")
    if args.scenario == "draft":
        print(
            f"greedy, {span(args.max_tokens)[1]} tokens: one request "
            f"{results['lone_tokens_per_s_draft']} tok/s with a {args.draft_layers}-"
            f"layer draft (k={args.num_speculative_tokens}), "
            f"{results['lone_tokens_per_s_plain']} without: {results['lone_speedup']}x "
            f"(acceptance {results['acceptance']}, same tokens "
            f"{results['same_tokens']}); {args.max_batch_size} at once: "
            f"{results['concurrent_tokens_per_s_draft']} against "
            f"{results['concurrent_tokens_per_s_plain']} tok/s "
            f"({results['concurrent_speedup']}x)"
        )
        return
    if args.scenario == "lone":
        print(
            f"one greedy request, per token after the first: lm.stream "
            f"{results['stream_itl_ms']} ms, engine ({args.max_batch_size} slots) "
            f"{results['engine_itl_ms']} ms: {results['engine_over_stream']}x"
        )
        return
    if args.scenario == "busy":
        ratio = results["engine_over_generate"]
        print(
            f"{args.max_batch_size} greedy requests together, per token: engine "
            f"{results['engine_itl_ms']} ms, lm.generate's batch step "
            f"{results['generate_step_ms']} ms: "
            + (
                f"{ratio}x"
                if ratio
                else "lm.generate's step is below this machine's noise "
                "(give more --max-tokens)"
            )
        )
        return
    if args.scenario == "shared-prefix":
        print(
            f"a {args.prefix}-token shared prefix + 20-token question, TTFT cached "
            f"{results['ttft_ms_cached']} ms, uncached {results['ttft_ms_uncached']} "
            f"ms: {results['ttft_cached_over_uncached']}x; {args.requests} at once: "
            f"{results['concurrent_cached']['output_tokens_per_s']} against "
            f"{results['concurrent_uncached']['output_tokens_per_s']} tok/s "
            f"({results['throughput_gain']}x)"
        )
        return
    if args.scenario == "ngram":
        for kind in ("repeating", "random"):
            run = results[kind]
            print(
                f"a {kind} prompt, greedy, {span(args.max_tokens)[1]} tokens: one "
                f"request {run['lone_tokens_per_s_lookup']} tok/s with prompt "
                f"lookup (n={args.ngram}, k={args.num_speculative_tokens}), "
                f"{run['lone_tokens_per_s_plain']} without: {run['lone_speedup']}x "
                f"(acceptance {run['acceptance']}); {args.max_batch_size} at once: "
                f"{run['concurrent_speedup']}x"
            )
        return
    if args.scenario == "long-prompt":
        for run in results["runs"]:
            print(
                f"prefill pause {run['prefill_pause'] or 'the default'}: "
                f"a {args.prefix}-token "
                f"prompt among {args.long} streams, their ITL p99 "
                f"{run['idle_itl']['p99_ms']} ms before it, {run['busy_itl']['p99_ms']} "
                f"ms until its first token ({run['p99_busy_over_idle']}x); its TTFT "
                f"{run['long_prompt_ttft_ms']} ms"
            )
        return
    if args.scenario == "short-among-long":
        print(
            f"short request TTFT idle {results['idle_ttft_ms']} ms, with {args.long} "
            f"long running {results['busy_ttft_ms']} ms: {results['busy_over_idle']}x"
        )
        if "server_busy_over_idle" in results:
            print(
                f"  as the server measured it (submission to first token): idle "
                f"{results['server_idle_ttft_ms']} ms, with {args.long} long running "
                f"{results['server_busy_ttft_ms']} ms: {results['server_busy_over_idle']}x"
            )
        return
    print(
        f"{args.requests} requests, rate {args.rate}/s, prompts {args.prompt_lengths} "
        f"tokens, max_tokens {args.max_tokens}, mix {','.join(args.mix)}"
    )
    for name in ("concurrent", "sequential"):
        run = results.get(name)
        if run is None:
            continue
        ttft, itl = run["time_to_first_token"] or {}, run["inter_token_latency"] or {}
        print(
            f"  {name:<10} {run['duration_s']:8.2f} s  {run['requests_per_s']:6.2f} req/s  "
            f"{run['output_tokens_per_s']:8.1f} tok/s  TTFT p50/p90/p99 "
            f"{ttft.get('p50_ms')}/{ttft.get('p90_ms')}/{ttft.get('p99_ms')} ms  ITL "
            f"{itl.get('p50_ms')}/{itl.get('p90_ms')}/{itl.get('p99_ms')} ms"
            + (f"  errors {run['errors']}" if run["errors"] else "")
        )
    if "batching_gain" in results:
        print(
            f"  batching gain {results['batching_gain']}x (concurrent takes "
            f"{1 / results['batching_gain']:.2f}x the sequential time)"
        )
    before, after = results["server_before"], results["server_after"]
    print(
        f"  server RSS {before['rss_mb']} -> {after['rss_mb']} MB, compilations "
        f"{before['compilations']} -> {after['compilations']}"
    )


def main(argv=None):
    args = parse_args(argv)
    if args.scenario in ("lone", "busy", "draft"):
        results = {
            "lone": scenario_lone,
            "busy": scenario_busy,
            "draft": scenario_draft,
        }[args.scenario](args)
    else:
        import httpx

        scenario = {
            "short-among-long": scenario_short_among_long,
            "shared-prefix": scenario_shared_prefix,
            "long-prompt": scenario_long_prompt,
            "ngram": scenario_ngram,
        }.get(args.scenario, scenario_load)
        # long-prompt: prefill paused for decode chunks, then prompts whole.
        pauses = list(args.pauses)
        if args.scenario == "long-prompt" and not args.no_baseline:
            pauses.append(float("inf"))
        runs = []
        for pause in pauses:
            args.prefill_pause = pause
            with server(args) as (url, process):
                with httpx.Client(base_url=url, timeout=args.max_seconds) as client:
                    runs.append(
                        {
                            **scenario(client, process, args),
                            "prefill_pause": pause,
                        }
                    )
        results = runs[0] if len(runs) == 1 else {"runs": runs}
    report(args, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": {k: v for k, v in vars(args).items()}, "results": results},
                f,
                indent=2,
                default=str,
            )
    errors = [
        run["errors"]
        for run in results.values()
        if isinstance(run, dict) and run.get("errors")
    ]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
