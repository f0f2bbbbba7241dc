"""Side-by-side generation benchmark: keras-gen and the systems users compare it with.

The reference workload is keras-nlp's compiled-generation benchmark: GPT-2
small (vocab 50257, 12 layers, 12 heads, hidden 768), batch 2, a 32-token
prompt, greedy, generated to `max_length=256` with no early stop. All systems
run the same weights: random GPT-2 weights are written once as a Hugging Face
folder (or `--model PATH` names a real one) and each system loads them
(CTranslate2 converts them first; llama.cpp gets them as a GGUF file).
Each system runs in its own worker process: the workers are started, loaded and warmed up one at a time (first
calls never overlap), then timed in alternating rounds (A B C, A B C, ...),
one timed run of each per round, and the median of the rounds is reported,
so that a machine that slows down during the run slows every system alike.

    KERAS_BACKEND=jax python tools/benchmark.py
    python tools/benchmark.py --systems keras-gen,ctranslate2,llama.cpp,llama.cpp-q8_0
    python tools/benchmark.py --batch 1,2,8 --systems keras-gen,ctranslate2
    python tools/benchmark.py --long      # batch 1, prompt 512 -> 1024: long contexts
    python tools/benchmark.py --backend torch --stream --json results.json
    python tools/benchmark.py --systems keras-gen,keras-gen-torch  # two backends
    python tools/benchmark.py --tiny --repeats 1      # a smoke test

With several batch sizes (`--batch 1,2,8`) every worker generates with each
in turn in one process (a round times each batch size of each system), and
each batch size gets its own table.

Reported per system: first call (compile + run), time to first token,
steady milliseconds per decode step and new tokens per second (median of
`--repeats` rounds), peak resident memory, and keras-gen's ratio to each
peer. It also checks that every system produced the same greedy tokens.
Peers whose packages are not installed (`ctranslate2`; `llama-cpp-python`
and `gguf` for llama.cpp) are skipped with a note.
"""

import argparse
import importlib.util
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
LONG_SYSTEMS = ("keras-gen", "ctranslate2", "llama.cpp")
# Every system `--systems` may name; keras-gen's quantized runs come with
# `--quantize`.
# keras-gen on a backend other than `--backend`, side by side with it.
BACKEND_SYSTEMS = {f"keras-gen-{name}": name for name in ("jax", "tensorflow", "torch")}
QUANTIZED = ("int8", "int8-weight-only", "int4")
PEERS = SYSTEMS + (
    "transformers-compiled",
    "ctranslate2",
    "ctranslate2-int8",
    "llama.cpp",
    "llama.cpp-q8_0",
    "llama.cpp-q4_0",
    *BACKEND_SYSTEMS,
    *(f"keras-gen-{mode}" for mode in QUANTIZED),
)
# The Python packages each peer needs.
PACKAGES = {
    "keras-hub": "keras_hub",
    "transformers": "transformers",
    "transformers-compiled": "transformers",
    "ctranslate2": "ctranslate2",
    "ctranslate2-int8": "ctranslate2",
    "llama.cpp": "llama_cpp gguf",
    "llama.cpp-q8_0": "llama_cpp gguf",
    "llama.cpp-q4_0": "llama_cpp gguf",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", help="a Hugging Face GPT-2 folder (default: random GPT-2 small)"
    )
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny random model, for smoke tests"
    )
    parser.add_argument(
        "--backend",
        default=os.environ.get("KERAS_BACKEND", "jax"),
        choices=["jax", "tensorflow", "torch"],
    )
    parser.add_argument(
        "--systems",
        help=f"comma-separated, from {','.join(PEERS)} "
        f"(default: {','.join(SYSTEMS)}; with --long, {','.join(LONG_SYSTEMS)})",
    )
    parser.add_argument(
        "--batch",
        type=batch_sizes,
        help="rows per call, or several comma-separated, each timed in turn "
        "in one process (default: 2; with --long, 1)",
    )
    parser.add_argument(
        "--prompt-length", type=int, help="default: 32; with --long, 512"
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="prompt plus new tokens (default: 256; with --tiny, its 128 "
        "positions; with --long, 1024)",
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="the long-context workload: batch 1, a 512-token prompt to "
        "max_length 1024, against CTranslate2 and llama.cpp",
    )
    parser.add_argument("--sampler", default="greedy")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds")
    parser.add_argument(
        "--stream", action="store_true", help="also time keras-gen's stream"
    )
    parser.add_argument(
        "--ttft-max-length",
        type=int,
        help="also time keras-gen's first token with this max_length "
        "(default: 1024; with --long, 0: not timed)",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZED,
        help="also run keras-gen quantized (int8: `quantize('int8')`, "
        "int8 activations too; int8-weight-only: float activations; int4: "
        "`quantize('int4')`, weight-only, groups of 128) and report its "
        "drift from float32",
    )
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--system", help=argparse.SUPPRESS)  # a child process
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = dict(
        systems=",".join(SYSTEMS),
        batch=[2],
        prompt_length=32,
        max_length=TINY["max_sequence_length"] if args.tiny else 256,
        ttft_max_length=1024,
    )
    if args.long:
        defaults.update(
            systems=",".join(LONG_SYSTEMS),
            batch=[1],
            prompt_length=512,
            max_length=1024,
            ttft_max_length=0,
        )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("prompt_length", "max_length", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.prompt_length >= args.max_length:
        parser.error("--prompt-length must be below --max-length")
    return args


def batch_sizes(text):
    """`--batch`: one size or several, comma-separated, each at least 1."""
    try:
        sizes = [int(size) for size in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or len(set(sizes)) < len(sizes):
        raise argparse.ArgumentTypeError(
            f"expected distinct sizes >= 1, comma-separated (e.g. 1,2,8); got {text!r}"
        )
    return sizes


def prompts(args, vocabulary_size, batch):
    """`batch` prompts of `--prompt-length` random token ids (the same
    for every system)."""
    rng = np.random.default_rng(0)
    return rng.integers(0, vocabulary_size, (batch, args.prompt_length)).tolist()


def batched(args, vocabulary_size):
    """The prompts of each of `--batch`'s sizes, by size."""
    return {batch: prompts(args, vocabulary_size, batch) for batch in args.batch}


def timed(fn):
    """`(seconds, result)` of one call of `fn`."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


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


def summarize(args, batch, first_call_s, rounds):
    """A system's figures for one batch size: its first call, and the
    medians of its rounds."""
    new_tokens = args.max_length - args.prompt_length

    def median(name):
        values = [r[name] for r in rounds if name in r]
        return statistics.median(values) if values else None

    total, ttft = median("total_s"), median("ttft_s")
    result = {
        "first_call_s": first_call_s,
        "time_to_first_token_ms": None if ttft is None else 1000 * ttft,
        # Prefill throughput: the prompts' tokens over the first token's time.
        "prompt_tokens_per_s": None
        if ttft is None
        else batch * args.prompt_length / ttft,
        "ms_per_step": 1000
        * (total - (ttft or 0))
        / max(new_tokens - (ttft is not None), 1),
        "tokens_per_s": batch * new_tokens / total,
        "total_s": total,
        "rounds": rounds,
    }
    if median("ttft_long_s") is not None:
        result["time_to_first_token_long_ms"] = 1000 * median("ttft_long_s")
    if median("stream_s") is not None:
        ratio = statistics.median(r["stream_s"] / r["total_s"] for r in rounds)
        result["stream_tokens_per_s"] = result["tokens_per_s"] / ratio
        result["stream_overhead"] = ratio - 1
    return result


def keras_gen_workload(args, quantize=None):
    import keras_gen

    lm = keras_gen.models.CausalLM.from_pretrained(args.weights)
    if quantize == "int4":
        lm.quantize("int4")
    elif quantize:
        lm.quantize("int8", quantize_activations=quantize != "int8-weight-only")
    lm.compile(sampler=args.sampler)
    batches = batched(args, lm.backbone.vocabulary_size)
    kwargs = dict(max_length=args.max_length, stop_token_ids=None, seed=0)

    def generate(batch):
        return [t[args.prompt_length :] for t in lm.generate(batches[batch], **kwargs)]

    def first_token(batch, max_length):
        stream = lm.stream(
            batches[batch],
            max_length=max_length,
            stop_token_ids=None,
            seed=0,
            stream_chunk_size=1,
        )
        next(stream)
        stream.close()

    def stream(batch):
        for _ in lm.stream(batches[batch], **kwargs):
            pass

    def log_probs(batch):
        # The float and quantized runs compare their greedy log-probs.
        output = lm.generate(
            batches[batch], **kwargs, return_dict=True, output_log_probs=True
        )
        return [row.tolist() for row in output.log_probs]

    workload = {"generate": generate, "first_token": first_token}
    if args.ttft_max_length and not quantize:
        workload["long_max_length"] = min(
            args.ttft_max_length,
            lm.backbone.max_sequence_length or args.ttft_max_length,
        )
    if args.stream:
        workload["stream"] = stream
    if args.quantize:
        workload["log_probs"] = log_probs
    return workload


def keras_hub_workload(args):
    import keras
    import keras_hub
    from keras_hub.src.utils.transformers import convert_gpt2
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    with open(os.path.join(args.weights, "config.json")) as file:
        config = json.load(file)
    backbone = keras_hub.models.GPT2Backbone(
        **convert_gpt2.convert_backbone_config(config)
    )
    with SafetensorLoader(args.weights) as loader:
        convert_gpt2.convert_weights(backbone, loader, config)
    lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    lm.compile(sampler=args.sampler)
    inputs = {}
    for size, batch in batched(args, config["vocab_size"]).items():
        token_ids = np.zeros((size, args.max_length), "int32")
        token_ids[:, : args.prompt_length] = batch
        inputs[size] = {
            "token_ids": token_ids,
            "padding_mask": token_ids * 0
            + (np.arange(args.max_length) < args.prompt_length),
        }
    keras.utils.set_random_seed(0)

    def generate(batch):
        outputs = lm.generate(inputs[batch], stop_token_ids=None)
        return np.asarray(outputs["token_ids"])[:, args.prompt_length :].tolist()

    return {"generate": generate}


def transformers_workload(args, compiled=False):
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.weights, dtype=torch.float32
    )
    model.eval()
    batches = {
        size: torch.tensor(batch)
        for size, batch in batched(args, model.config.vocab_size).items()
    }
    new_tokens = args.max_length - args.prompt_length
    kwargs = dict(
        do_sample=args.sampler != "greedy",
        pad_token_id=0,
    )
    if compiled:
        kwargs["cache_implementation"] = "static"
        model.forward = torch.compile(model.forward, dynamic=False)

    def generate(batch, n=new_tokens):
        with torch.no_grad():
            outputs = model.generate(
                batches[batch],
                attention_mask=torch.ones_like(batches[batch]),
                max_new_tokens=n,
                min_new_tokens=n,
                **kwargs,
            )
        return outputs[:, args.prompt_length :].tolist()

    return {
        "generate": generate,
        "first_token": lambda batch, max_length: generate(batch, 1),
    }


def ctranslate2_workload(args, quantization="float32"):
    import ctranslate2

    if args.sampler != "greedy":
        raise ValueError("the CTranslate2 runner decodes greedily only")
    # Converted into a folder of this process's: never into the user's model.
    scratch = tempfile.TemporaryDirectory()
    folder = os.path.join(scratch.name, "model")
    ctranslate2.converters.TransformersConverter(args.weights).convert(
        folder, quantization=quantization
    )
    generator = ctranslate2.Generator(
        folder, device="cpu", intra_threads=os.cpu_count()
    )
    with open(os.path.join(args.weights, "tokenizer.json")) as file:
        vocabulary = json.load(file)["model"]["vocab"]
    names = {index: token for token, index in vocabulary.items()}
    batches = {
        size: [[names[t] for t in row] for row in batch]
        for size, batch in batched(args, len(names)).items()
    }
    new_tokens = args.max_length - args.prompt_length

    def generate(batch, n=new_tokens):
        # No end token: exactly `n` new tokens.
        results = generator.generate_batch(
            batches[batch],
            max_length=n,
            sampling_topk=1,
            end_token=[],
            include_prompt_in_result=False,
        )
        return [result.sequences_ids[0] for result in results]

    return {
        "generate": generate,
        "first_token": lambda batch, max_length: generate(batch, 1),
        "scratch": scratch,
    }


def write_gguf(weights, path, quantization):
    """The Hugging Face GPT-2 folder `weights` as a llama.cpp GGUF file:
    float32 tensors, or `q8_0` / `q4_0` matrices. No tokenizer (token ids
    go in)."""
    import gguf
    from safetensors.numpy import load_file

    with open(os.path.join(weights, "config.json")) as file:
        config = json.load(file)
    tensors = load_file(os.path.join(weights, "model.safetensors"))
    writer = gguf.GGUFWriter(path, "gpt2")
    writer.add_context_length(config["n_positions"])
    writer.add_embedding_length(config["n_embd"])
    writer.add_feed_forward_length(config.get("n_inner") or 4 * config["n_embd"])
    writer.add_block_count(config["n_layer"])
    writer.add_head_count(config["n_head"])
    writer.add_layer_norm_eps(config["layer_norm_epsilon"])
    writer.add_tokenizer_model("none")
    writer.add_vocab_size(config["vocab_size"])
    names = {
        "wte": "token_embd",
        "wpe": "position_embd",
        "ln_f": "output_norm",
        "ln_1": "attn_norm",
        "ln_2": "ffn_norm",
        "attn.c_attn": "attn_qkv",
        "attn.c_proj": "attn_output",
        "mlp.c_fc": "ffn_up",
        "mlp.c_proj": "ffn_down",
    }
    for name, value in tensors.items():
        parts = name.removeprefix("transformer.").split(".")
        # h.{i}.{module}.{weight|bias}, or {module}.{weight|bias}
        block, module = (
            (parts[1], ".".join(parts[2:-1])) if parts[0] == "h" else (None, parts[0])
        )
        if module not in names:
            continue  # attention masks of older checkpoints, lm_head (tied)
        target = f"{names[module]}.{parts[-1]}"
        target = target if block is None else f"blk.{block}.{target}"
        value = value.astype("float32")
        if parts[0] == "h" and parts[-1] == "weight" and value.ndim == 2:
            value = value.T.copy()  # Conv1D (in, out) to ggml's (out, in) rows
        if quantization != "f32" and value.ndim == 2:
            kind = gguf.GGMLQuantizationType[quantization.upper()]
            writer.add_tensor(target, gguf.quants.quantize(value, kind), raw_dtype=kind)
        else:
            writer.add_tensor(target, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama_cpp_workload(args, quantization="f32"):
    """llama.cpp through llama-cpp-python's C API: every row of the batch
    is a sequence of one `llama_batch`, so rows decode together."""
    import llama_cpp as llama

    if args.sampler != "greedy":
        raise ValueError("the llama.cpp runner decodes greedily only")
    scratch = tempfile.TemporaryDirectory()
    path = os.path.join(scratch.name, "model.gguf")
    write_gguf(args.weights, path, quantization)
    llama.llama_backend_init()
    model_params = llama.llama_model_default_params()
    model_params.n_gpu_layers = 0
    model = llama.llama_model_load_from_file(path.encode(), model_params)
    if not model:
        raise RuntimeError("llama.cpp could not load the GGUF file")
    with open(os.path.join(args.weights, "config.json")) as file:
        vocabulary_size = json.load(file)["vocab_size"]
    batches = batched(args, vocabulary_size)
    rows = max(args.batch)
    context_params = llama.llama_context_default_params()
    context_params.n_ctx = context_params.n_batch = context_params.n_ubatch = (
        rows * args.max_length
    )
    context_params.n_seq_max = rows
    if quantization == "f32":
        # By default llama.cpp keeps float16 keys and values, and its CPU
        # flash attention computes in float16: float32 throughout instead.
        context_params.type_k = context_params.type_v = llama.GGML_TYPE_F32
        context_params.flash_attn_type = llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
    context_params.n_threads = context_params.n_threads_batch = os.cpu_count()
    context = llama.llama_init_from_model(model, context_params)
    if not context:
        raise RuntimeError("llama.cpp could not make a context")
    memory = llama.llama_get_memory(context)
    request = llama.llama_batch_init(rows * args.prompt_length, 0, rows)

    def decode(row_tokens, position):
        """Run each row's tokens from `position`; the greedy next token of each."""
        n, last = 0, []
        for row, ids in enumerate(row_tokens):
            for offset, token in enumerate(ids):
                request.token[n], request.pos[n] = token, position + offset
                request.n_seq_id[n], request.seq_id[n][0] = 1, row
                request.logits[n] = offset == len(ids) - 1
                n += 1
            last.append(n - 1)
        request.n_tokens = n
        if llama.llama_decode(context, request) != 0:
            raise RuntimeError("llama_decode failed")
        return [
            int(
                np.argmax(
                    np.ctypeslib.as_array(
                        llama.llama_get_logits_ith(context, i), shape=(vocabulary_size,)
                    )
                )
            )
            for i in last
        ]

    def generate(batch, n=args.max_length - args.prompt_length):
        llama.llama_memory_clear(memory, True)
        next_tokens = decode(batches[batch], 0)
        outputs = [[t] for t in next_tokens]
        for step in range(1, n):
            next_tokens = decode(
                [[t] for t in next_tokens], args.prompt_length + step - 1
            )
            for row, token in zip(outputs, next_tokens):
                row.append(token)
        return outputs

    # The GGUF file's folder and llama.cpp's handles live as long as the workload.
    return {
        "generate": generate,
        "first_token": lambda batch, max_length: generate(batch, 1),
        "scratch": scratch,
        "model": model,
        "context": context,
    }


WORKLOADS = {
    "keras-gen": keras_gen_workload,
    "keras-gen-int8": lambda a: keras_gen_workload(a, quantize="int8"),
    "keras-gen-int8-weight-only": lambda a: keras_gen_workload(
        a, quantize="int8-weight-only"
    ),
    "keras-gen-int4": lambda a: keras_gen_workload(a, quantize="int4"),
    "keras-hub": keras_hub_workload,
    "transformers": transformers_workload,
    "transformers-compiled": lambda a: transformers_workload(a, compiled=True),
    "ctranslate2": ctranslate2_workload,
    "ctranslate2-int8": lambda a: ctranslate2_workload(a, quantization="int8"),
    **{name: keras_gen_workload for name in BACKEND_SYSTEMS},
    "llama.cpp": llama_cpp_workload,
    "llama.cpp-q8_0": lambda a: llama_cpp_workload(a, quantization="q8_0"),
    "llama.cpp-q4_0": lambda a: llama_cpp_workload(a, quantization="q4_0"),
}


def send(message):
    """A worker's answer: one line on stdout, marked (libraries print too)."""
    print("@@" + json.dumps(message), flush=True)


def worker(args):
    """Load the system, run its first call and warm-ups for each batch
    size, say it is ready; then one timed run of each measurement of batch
    size B per `round B` line on stdin, and its tokens (and peak memory)
    on `finish`."""
    start = time.perf_counter()
    workload = WORKLOADS[args.system](args)
    ready = {"load_s": time.perf_counter() - start, "first_call_s": {}}
    tokens = {}
    long = workload.get("long_max_length")
    for batch in args.batch:
        ready["first_call_s"][batch], tokens[batch] = timed(
            lambda: workload["generate"](batch)
        )
        # Warm-ups of every measured shape: no round compiles anything.
        if "first_token" in workload:
            workload["first_token"](batch, args.max_length)
            if long:
                workload["first_token"](batch, long)
        if "stream" in workload:
            workload["stream"](batch)
    ready["ttft_long_max_length"] = long
    send(ready)
    for command in sys.stdin:
        words = command.split()
        if words[:1] == ["round"]:
            batch = int(words[1])
            measured, tokens[batch] = timed(lambda: workload["generate"](batch))
            result = {"total_s": measured}
            if "first_token" in workload:
                result["ttft_s"] = timed(
                    lambda: workload["first_token"](batch, args.max_length)
                )[0]
                if long:
                    result["ttft_long_s"] = timed(
                        lambda: workload["first_token"](batch, long)
                    )[0]
            if "stream" in workload:
                result["stream_s"] = timed(lambda: workload["stream"](batch))[0]
            send(result)
        elif words == ["finish"]:
            final = {"peak_memory_mb": peak_memory_mb(), "batches": {}}
            for batch in args.batch:
                final["batches"][batch] = {"tokens": tokens[batch]}
                if "log_probs" in workload:
                    final["batches"][batch]["log_probs"] = workload["log_probs"](batch)
            send(final)
            return


def write_random_weights(args, folder):
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    import keras_gen

    keras.utils.set_random_seed(0)
    config = TINY if args.tiny else GPT2_SMALL
    # A longer context where asked (tools/benchmark_serving.py's 2,000-token
    # prompts): more learned positions, the same shapes otherwise.
    context = max(config["max_sequence_length"], getattr(args, "context", 0))
    config = {**config, "max_sequence_length": context}
    backbone = keras_gen.models.GPT2Backbone(**config)
    # Wider than GPT-2's 0.02 initialisation, so that greedy choices are not
    # decided by float rounding and the token check is meaningful. Keras'
    # own initialisation where asked: its greedy text soon repeats itself
    # (tools/benchmark_serving.py's prompt-lookup scenario).
    rng = np.random.default_rng(0)
    for variable in backbone.weights:
        if getattr(args, "keras_init", False):
            break
        if not variable.path.endswith(("gamma", "beta", "bias")):
            variable.assign(rng.normal(0, 0.05, variable.shape).astype("float32"))
    keras_gen.models.GPT2CausalLM(backbone).save_pretrained(folder)
    write_id_tokenizer(folder, config["vocabulary_size"])


def write_id_tokenizer(folder, vocabulary_size):
    """A tokenizer whose token `i` is the string `<i>`: CTranslate2's
    converter reads the vocabulary from a tokenizer, and the random weights
    have none."""
    from tokenizers import Tokenizer
    from tokenizers import models

    vocabulary = {f"<{i}>": i for i in range(vocabulary_size)}
    Tokenizer(models.WordLevel(vocabulary, unk_token="<0>")).save(
        os.path.join(folder, "tokenizer.json")
    )
    end = f"<{vocabulary_size - 1}>"
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as file:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": end,
                "eos_token": end,
                "unk_token": "<0>",
            },
            file,
        )


class Worker:
    """A system's worker process and its marked answers."""

    def __init__(self, args, system, backend):
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--system",
            system,
            "--weights",
            args.weights,
            "--batch",
            ",".join(map(str, args.batch)),
            "--prompt-length",
            str(args.prompt_length),
            "--max-length",
            str(args.max_length),
            "--sampler",
            args.sampler,
            "--ttft-max-length",
            str(args.ttft_max_length),
        ]
        if args.stream:
            command.append("--stream")
        if args.quantize:
            command += ["--quantize", args.quantize]
        env = {
            **os.environ,
            "KERAS_BACKEND": backend,
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "PYTHONUNBUFFERED": "1",
        }
        self.errors = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )

    def ask(self, command=None):
        if command:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        self.process.wait()
        self.errors.seek(0)
        raise RuntimeError(self.errors.read().strip().splitlines()[-1:] or ["failed"])

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.errors.close()


def run_systems(args, systems):
    """Start each system in turn, then time them in alternating rounds."""
    results, workers, ready = {}, {}, {}
    try:
        for system in systems:
            missing = [
                package
                for package in PACKAGES.get(system, "").split()
                if importlib.util.find_spec(package) is None
            ]
            if missing:
                results[system] = {"skipped": f"{' and '.join(missing)} not installed"}
                continue
            backend = BACKEND_SYSTEMS.get(system) or (
                "torch" if system.startswith("transformers") else args.backend
            )
            runs_on = (
                "its own runtime"
                if system.startswith(("ctranslate2", "llama.cpp"))
                else backend
            )
            print(f"starting {system} ({runs_on}) ...", file=sys.stderr, flush=True)
            workers[system] = Worker(args, system, backend)
            try:
                ready[system] = workers[system].ask()
            except RuntimeError as error:
                results[system] = {"error": error.args[0]}
                workers.pop(system).close()
        rounds = {system: {batch: [] for batch in args.batch} for system in workers}
        for number in range(args.repeats):
            print(
                f"round {number + 1} of {args.repeats} ...", file=sys.stderr, flush=True
            )
            for batch in args.batch:
                for system, process in workers.items():
                    rounds[system][batch].append(process.ask(f"round {batch}"))
        for system, process in workers.items():
            final = process.ask("finish")
            # JSON's keys are strings: batch sizes as `str`.
            results[system] = {
                "load_s": ready[system]["load_s"],
                "ttft_long_max_length": ready[system]["ttft_long_max_length"],
                "peak_memory_mb": final["peak_memory_mb"],
                "batches": {
                    str(batch): {
                        **summarize(
                            args,
                            batch,
                            ready[system]["first_call_s"][str(batch)],
                            rounds[system][batch],
                        ),
                        **final["batches"][str(batch)],
                    }
                    for batch in args.batch
                },
            }
    finally:
        for process in workers.values():
            process.close()
    return {system: results[system] for system in systems}


def drift(reference, quantized):
    """Where greedy tokens first differ, and the largest log-prob change
    over the positions before it (after it the rows run different text)."""
    agree, change = [], 0.0
    for tokens, other, log_probs, other_log_probs in zip(
        reference["tokens"],
        quantized["tokens"],
        reference["log_probs"],
        quantized["log_probs"],
    ):
        same = next(
            (i for i, (a, b) in enumerate(zip(tokens, other)) if a != b), len(tokens)
        )
        agree.append(same)
        # Up to and including the first differing position: its log-prob
        # is of a different token, the change that flipped the choice.
        n = min(same + 1, len(tokens))
        change = max(
            change, float(np.abs(np.subtract(log_probs[:n], other_log_probs[:n])).max())
        )
    return (
        f"greedy tokens agree for {agree} of {len(reference['tokens'][0])} new "
        f"tokens per row; max |log-prob change| {change:.4f} up to the first difference"
    )


def report(args, results):
    for batch in map(str, args.batch):
        report_batch(args, batch, results)
    ours = results.get("keras-gen", {})
    if len(args.batch) > 1 and "batches" in ours:
        for name, r in results.items():
            if name != "keras-gen" and "batches" in r:
                ratios = ", ".join(
                    f"batch {b} x{ours['batches'][b]['ms_per_step'] / r['batches'][b]['ms_per_step']:.2f}"
                    for b in map(str, args.batch)
                )
                print(f"keras-gen / {name}, time per step: {ratios}")


def report_batch(args, batch, all_results):
    """The table of one batch size, and keras-gen's ratios to each peer."""
    print(
        f"\nbackend={args.backend} batch={batch} prompt={args.prompt_length} "
        f"max_length={args.max_length} sampler={args.sampler} repeats={args.repeats}"
    )
    header = (
        f"{'system':24} {'first call s':>12} {'TTFT ms':>9} {'prompt tok/s':>12} "
        f"{'ms/step':>8} {'tokens/s':>9} {'peak MB':>8}"
    )
    print(header)
    results = {}
    for name, r in all_results.items():
        if "error" in r or "skipped" in r:
            print(
                f"{name:24} {'error' if 'error' in r else 'skipped'}: "
                f"{r.get('error') or r['skipped']}"
            )
            continue
        results[name] = result = r["batches"][batch]
        ttft, prefill = "n/a", "n/a"
        if result["time_to_first_token_ms"] is not None:
            ttft = f"{result['time_to_first_token_ms']:.1f}"
            prefill = f"{result['prompt_tokens_per_s']:.0f}"
        print(
            f"{name:24} {result['first_call_s']:12.1f} {ttft:>9} {prefill:>12} "
            f"{result['ms_per_step']:8.1f} {result['tokens_per_s']:9.1f} "
            f"{r['peak_memory_mb']:8.0f}"
        )
    ours = results.get("keras-gen")
    if ours is None:
        return
    for name, r in results.items():
        if name == "keras-gen":
            continue
        same = sum(a == b for a, b in zip(ours["tokens"], r["tokens"]))
        print(
            f"keras-gen / {name}: time per step x{ours['ms_per_step'] / r['ms_per_step']:.2f}, "
            f"tokens/s x{ours['tokens_per_s'] / r['tokens_per_s']:.2f}; "
            f"same tokens in {same}/{len(ours['tokens'])} rows"
        )
    for name, r in results.items():
        if "log_probs" in r and name != "keras-gen" and "log_probs" in ours:
            print(f"{name} drift from float32: {drift(ours, r)}")
    if "time_to_first_token_long_ms" in ours:
        long = all_results["keras-gen"]["ttft_long_max_length"]
        print(
            f"keras-gen first token: {ours['time_to_first_token_ms']:.1f} ms at max_length="
            f"{args.max_length}, {ours['time_to_first_token_long_ms']:.1f} ms at max_length="
            f"{long} (x{ours['time_to_first_token_long_ms'] / ours['time_to_first_token_ms']:.2f})"
        )
    if "stream_overhead" in ours:
        print(
            f"keras-gen stream: {ours['stream_tokens_per_s']:.1f} tokens/s, "
            f"{100 * ours['stream_overhead']:+.1f}% time against generate"
        )


def main(argv=None):
    args = parse_args(argv)
    if args.system:
        return worker(args)
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(PEERS))
    if unknown:
        raise SystemExit(f"--systems: unknown {unknown}; choose from {','.join(PEERS)}")
    if args.quantize:
        systems.insert(1, f"keras-gen-{args.quantize}")
    with tempfile.TemporaryDirectory() as folder:
        if args.model:
            args.weights = args.model
        else:
            args.weights = folder
            write_random_weights(args, folder)
        results = run_systems(args, systems)
    report(args, results)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"arguments": vars(args), "results": results}, file, indent=1)
    failed = sorted(name for name, result in results.items() if "error" in result)
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    ours = results.get("keras-gen", {}).get("batches", {})
    peer = results.get("transformers", {}).get("batches", {})
    if args.sampler == "greedy" and ours and peer:
        if any(ours[b]["tokens"] != peer[b]["tokens"] for b in ours):
            print("WARNING: keras-gen's greedy tokens differ from transformers'.")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
