"""The `keras-gen` command: generate text, serve a model, run the benchmark.

    keras-gen generate "The for statement"            # the bundled demo model
    keras-gen generate - --model path/to/model < prompt.txt
    keras-gen chat --system "Be brief."
    keras-gen serve --model demo --port 8000
    keras-gen bench

Keras is imported only after the arguments are read, because `--backend`
must set `KERAS_BACKEND` before Keras loads.
"""

import argparse
import difflib
import importlib
import json
import os
import subprocess
import sys
import time

from keras_gen.generation.chat_session import DEFAULT_REPLY_TOKENS
from keras_gen.generation.generation_config import OPTIONS
from keras_gen.utils import backend_choice
from keras_gen.utils.ticker import Ticker

BACKENDS = ("jax", "tensorflow", "torch")
# `--sampler` names, as the decoding-mode options they stand for (filled in
# from the other flags, see `_sampler_options`); "random", "top_k", "top_p"
# and "min_p" sample, with whichever filters the flags and the model give.
SAMPLERS = (
    "greedy",
    "sample",
    "random",
    "top_k",
    "top_p",
    "min_p",
    "beam",
    "contrastive",
)
# Generation options with a flag of their own: `--max-new-tokens` for
# `max_new_tokens`, and so on (`--stop` sets `stop_strings`).
FLAG_OPTIONS = {name: meta["flag"] for name, meta in OPTIONS.items() if meta["flag"]}
BACKEND_HELP = (
    "Keras backend (default: $KERAS_BACKEND, else keras.json's, else the "
    "first installed of jax, torch, tensorflow)."
)
DEFAULT_MODEL = "demo"
DEFAULT_MAX_NEW_TOKENS = 64


# Characters of the loading line's bar.
BAR_WIDTH = 20


class UsageError(Exception):
    """A bad argument value found after parsing: exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """An `argparse` parser whose errors are one line and exit with 2, and
    whose help shows each flag's default."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def unknown(self, arguments):
        """Refuse `arguments`, suggesting the flag each one resembles."""
        flags = [flag for flag in self._option_string_actions if flag.startswith("--")]
        hints = []
        for argument in arguments:
            close = difflib.get_close_matches(argument.split("=")[0], flags, n=1)
            if argument.startswith("-") and close:
                hints.append(f"{argument} (did you mean {close[0]}?)")
            else:
                hints.append(argument)
        self.error(f"unrecognized arguments: {' '.join(hints)}")


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help with `(default: ...)` after each flag that has a default and
    does not say it already."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, [], argparse.SUPPRESS)
            or not action.option_strings
            or action.nargs == 0  # a switch
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def _number(kind, low=None, high=None, low_open=False, name=None, nan=True):
    """An argparse `type` that checks a number's range, with a clear message
    (NaN passes unless `nan=False`: the option's own check names it)."""

    def parse(text):
        try:
            value = kind(text)
            if not nan and value != value:
                raise ValueError(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}"
            ) from None
        too_low = low is not None and (value <= low if low_open else value < low)
        if too_low or (high is not None and value > high):
            bounds = f"{'>' if low_open else '>='} {low}" if low is not None else ""
            if high is not None:
                bounds += f"{' and ' if bounds else ''}<= {high}"
            raise argparse.ArgumentTypeError(f"{text} must be {bounds}")
        return value

    parse.__name__ = name or kind.__name__
    return parse


def _processor_spec(text):
    """`NAME=MODULE:CLASS`, checked for its form (imported when serving)."""
    name, _, target = text.partition("=")
    module, _, attribute = target.partition(":")
    if not (name and module and attribute):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME=MODULE:CLASS (e.g. boost=my_processors:Boost)"
        )
    return name, module, attribute


def _import_processors(specs):
    """`{name: class}` for `--processor`'s `(name, module, class)` triples; a
    module that does not import, or a class it lacks, is a usage error."""
    if os.getcwd() not in sys.path:  # as `python -m` finds the folder's modules
        sys.path.append(os.getcwd())
    processors = {}
    for name, module_name, attribute in specs:
        flag = f"--processor {name}={module_name}:{attribute}"
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise UsageError(f"{flag}: cannot import {module_name}: {error}") from None
        if not hasattr(module, attribute):
            raise UsageError(f"{flag}: {module_name} has no {attribute}")
        processors[name] = getattr(module, attribute)
    return processors


def _add_common(parser):
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=argparse.SUPPRESS,
        help=BACKEND_HELP,
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="a bundled preset name or a local Hugging Face model folder "
        "(default: demo).",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="the weights' dtype (default: the checkpoint's)",
    )
    parser.add_argument(
        "--lora",
        metavar="FOLDER",
        default=None,
        help="a PEFT LoRA adapter folder (adapter_config.json, "
        "adapter_model.safetensors), merged into the model after loading",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show the start-up logs of the libraries underneath "
        "(TensorFlow's C++ lines)",
    )
    parser.add_argument(
        "--no-compilation-cache",
        action="store_true",
        help="compile afresh, without the persistent compilation cache "
        "(same as KERAS_GEN_COMPILATION_CACHE=0)",
    )


def _add_generation_flags(parser, new_tokens=f"else {DEFAULT_MAX_NEW_TOKENS}"):
    """`--sampler`, a flag per generation option, and `--stop`;
    `new_tokens` says what `--max-new-tokens` defaults to."""
    parser.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=None,
        help="greedy, sample (random, top_k, top_p and min_p sample too), "
        "beam or contrastive (default: the model's generation_config.json, "
        "else greedy)",
    )
    for name, kind in FLAG_OPTIONS.items():
        default = f", {new_tokens}" if name == "max_new_tokens" else ""
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=_number(kind),
            help=f"{OPTIONS[name]['help']} (default: the model's "
            f"generation_config.json{default})",
        )
    parser.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="STRING",
        help="stop once the text contains STRING (repeat the flag for several)",
    )


def _add_generate(commands):
    """The `generate` command and its flags."""
    generate = commands.add_parser(
        "generate",
        help="generate text from a prompt",
        description="Generate text from a prompt and stream it to the terminal.",
    )
    generate.add_argument("prompt", help="the prompt; '-' reads it from stdin")
    _add_common(generate)
    _add_generation_flags(generate)
    structured = generate.add_mutually_exclusive_group()
    structured.add_argument(
        "--json-schema",
        metavar="FILE",
        help="generate JSON valid under the JSON schema in FILE",
    )
    structured.add_argument(
        "--regex", metavar="PATTERN", help="generate text that matches PATTERN"
    )
    structured.add_argument(
        "--choice",
        nargs="+",
        metavar="TEXT",
        help="generate exactly one of these texts",
    )
    generate.add_argument(
        "--no-stream", action="store_true", help="print the text once it is done"
    )
    generate.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: text, tokens, finish reason, timing",
    )


def _add_chat(commands):
    """The `chat` command and its flags."""
    chat = commands.add_parser(
        "chat",
        help="chat with a model in the terminal",
        description="Chat with a model: each line you type is a message, the "
        "reply streams back, and the conversation is kept (the oldest turns "
        "are dropped when it outgrows the context). Type /clear to start "
        "over, /exit (or Ctrl-D) to leave. On a pipe, each line of stdin is "
        "a message and only the replies are printed, one per line.",
    )
    _add_common(chat)
    _add_generation_flags(
        chat, new_tokens=f"else up to {DEFAULT_REPLY_TOKENS}, as the context allows"
    )
    system = chat.add_mutually_exclusive_group()
    system.add_argument("--system", metavar="TEXT", help="the system message")
    system.add_argument(
        "--system-file", metavar="FILE", help="read the system message from FILE"
    )


def _add_serve(commands):
    """The `serve` command and its flags."""
    serve = commands.add_parser(
        "serve",
        help="serve a model over HTTP (OpenAI-style API)",
        description="Serve a model with an OpenAI-compatible HTTP API "
        "(/v1/completions, /v1/chat/completions, /v1/models, /health).",
    )
    _add_common(serve)
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (0.0.0.0: every interface)",
    )
    serve.add_argument(
        "--port", type=_number(int, 0, 65535), default=8000, help="the TCP port"
    )
    serve.add_argument(
        "--max-batch-size",
        type=_number(int, low=1),
        default=8,
        help="requests decoded together (the engine's slots)",
    )
    serve.add_argument(
        "--max-length",
        type=_number(int, low=1),
        default=None,
        help="prompt plus completion tokens a request may reach "
        "(default: the model's context, at most 2048)",
    )
    serve.add_argument(
        "--max-queue",
        type=_number(int, low=1),
        default=256,
        help="requests that may wait for a slot; more get a 429",
    )
    serve.add_argument(
        "--prefix-cache-bytes",
        type=_number(int, low=0),
        default=None,
        help="host memory for reused prompt prefixes, 0 for none (default: "
        "the key/value cache's size, at most 1 GiB)",
    )
    serve.add_argument(
        "--prefill-chunk-tokens",
        type=_number(int, low=16),
        default=256,
        help="the most prompt tokens one prefill chunk computes (default 256); "
        "while requests decode, the chunks between two decode chunks take "
        "about as long as one",
    )
    serve.add_argument(
        "--prefill-pause",
        type=_number(float, low=0, nan=False),
        default=1.0,
        help="how long prefill may pause running requests between two decode "
        "chunks, in decode chunks (default 1; 'inf': every admitted prompt first)",
    )
    serve.add_argument(
        "--num-speculative-tokens",
        type=_number(int, 1, 32),
        default=None,
        help="let requests speculate by prompt lookup (their "
        "`prompt_lookup_ngram`), or with --draft-model, proposing at most this "
        "many tokens per step (default: no speculation; 4 with --draft-model)",
    )
    serve.add_argument(
        "--draft-model",
        default=None,
        help="a smaller model (folder or preset, with the served model's "
        "vocabulary) that drafts tokens for every request to verify",
    )
    serve.add_argument(
        "--warm-up",
        choices=("background", "wait", "off"),
        default="background",
        help="compile every program at startup and serve at once, torch "
        "compiling its decode step in the background meanwhile (requests run "
        "it eagerly until then); or serve once every compile is done; or "
        "compile on the first requests (default: background)",
    )
    serve.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_const",
        const="off",
        help="the same as --warm-up off",
    )
    serve.add_argument(
        "--model-name",
        default=None,
        help="the name clients use in requests (default: the --model value)",
    )
    serve.add_argument(
        "--processor",
        dest="processors",
        metavar="NAME=MODULE:CLASS",
        type=_processor_spec,
        action="append",
        default=[],
        help="register a logits processor class (a LogitsProcessor subclass, "
        "imported from MODULE, which may be a .py file of the current folder) "
        "under NAME, for requests to select in their `processors` field; "
        "repeat it for several",
    )


def _add_bench(commands):
    """The `bench` command."""
    bench = commands.add_parser(
        "bench",
        help="run tools/benchmark.py's default workload",
        description="Run tools/benchmark.py (from a source checkout) with its "
        "default workload; extra arguments are passed on to it.",
    )
    bench.add_argument(
        "--backend",
        choices=BACKENDS,
        default=argparse.SUPPRESS,
        help=BACKEND_HELP,
    )
    bench.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def build_parser():
    from keras_gen import __version__

    parser = ArgumentParser(
        prog="keras-gen",
        description="Compiled text generation with Keras 3.",
    )
    parser.add_argument(
        "--version", action="version", version=f"keras-gen {__version__}"
    )
    parser.add_argument("--backend", choices=BACKENDS, default=None, help=BACKEND_HELP)
    commands = parser.add_subparsers(
        dest="command",
        metavar="{generate,chat,serve,bench}",
        parser_class=ArgumentParser,
    )
    commands.required = True

    _add_generate(commands)
    _add_chat(commands)
    _add_serve(commands)
    _add_bench(commands)
    return parser


def _subparser(parser, command):
    (commands,) = [
        action
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    return commands.choices[command]


def select_backend(requested):
    """Set `KERAS_BACKEND` before Keras is imported; return the backend.

    Without `requested`, the backend `import keras_gen` chose stands (see
    `keras_gen.utils.backend_choice`).
    """
    backend = requested or os.environ.get("KERAS_BACKEND")
    if requested:
        backend_choice.forget_choice()
    if "keras" in sys.modules:
        loaded = sys.modules["keras"].config.backend()
        if requested and loaded != requested:
            raise UsageError(
                f"--backend {requested}: Keras is already loaded with the "
                f"{loaded} backend in this process"
            )
        return loaded
    if backend is not None:
        os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return backend


def _import_quietly(module):
    """Import `module` with the process's stderr (file descriptor 2) on
    /dev/null: TensorFlow's C++ logs its start-up (oneDNN, CUDA) before any
    setting can silence it. An import error still raises, once stderr is
    back."""
    sys.stderr.flush()
    saved, quiet = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(quiet, 2)
        __import__(module)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(quiet)


def say(message):
    """A progress line on stderr (stdout carries only the answer)."""
    print(f"keras-gen: {message}", file=sys.stderr, flush=True)


def load_model(model, dtype=None, lora=None):
    """A `CausalLM` from a preset name or a model folder (and a LoRA adapter
    merged in), with clean errors; says on stderr what it loaded and how
    long it took."""
    started = time.perf_counter()
    from keras_gen import presets

    if model not in presets.list_presets():
        if not os.path.isdir(model):
            hint = ""
            if not model.startswith((".", "/", "~")) and model.count("/") <= 1:
                hint = (
                    "; keras-gen does not download models: download it first "
                    f"(e.g. `huggingface-cli download {model} --local-dir "
                    f"{model.split('/')[-1]}`), then pass the folder"
                )
            raise UsageError(
                f"--model {model!r}: no such model folder (and not a bundled "
                f"preset: {', '.join(presets.list_presets())}){hint}"
            )
    from keras_gen.models import CausalLM
    from keras_gen.utils import progress

    weights = {}  # the loader's progress, read by the ticker's thread

    def describe():
        if not weights:
            return f"loading {model}"
        done, total = weights["done"], weights["total"]
        filled = BAR_WIDTH * done // max(total, 1)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return f"loading {model} [{bar}] {done}/{total} weights"

    def report(done, total, description):
        weights.update(done=done, total=total)

    try:
        with Ticker(describe, closing_line=False), progress.reporting(report):
            lm = CausalLM.from_preset(model, dtype=dtype)
    except (OSError, ValueError) as error:
        raise UsageError(f"--model {model!r}: {_first_line(error)}") from None
    if lora is not None:
        try:
            count = lm.load_lora(lora)
        except (OSError, ValueError) as error:
            raise UsageError(f"--lora {lora!r}: {_first_line(error)}") from None
        lm.backbone.merge_lora()
        model = f"{model} with the adapter {lora} ({count} projections)"
    seconds = time.perf_counter() - started
    say(f"loaded {model} on {_backend()} in {seconds:.1f} s")
    return lm


def generation_options(args):
    """The `GenerationConfig` the flags ask for (unset where they are)."""
    from keras_gen.generation.generation_config import GenerationConfig

    options = {
        name: getattr(args, name)
        for name in FLAG_OPTIONS
        if getattr(args, name) is not None
    }
    options.update(_sampler_options(args.sampler, options))
    if args.stop:
        options["stop_strings"] = args.stop
    flag, response_format = _response_format(args)
    if response_format is not None:
        options["response_format"] = response_format
    try:
        return GenerationConfig(**options)
    except (TypeError, ValueError) as error:
        message = _first_line(error)
        for name in options:
            shown = flag if name == "response_format" else _flag(name)
            message = message.replace(f"`{name}`", shown)
        raise UsageError(message) from None


def _response_format(args):
    """`(flag, response_format)` of `--json-schema`, `--regex` or
    `--choice`; `(None, None)` without them."""
    if getattr(args, "json_schema", None) is not None:
        try:
            with open(args.json_schema, encoding="utf-8") as f:
                schema = json.load(f)
        except (OSError, ValueError) as error:
            raise UsageError(f"--json-schema {args.json_schema}: {error}") from None
        return "--json-schema", {"json": schema}
    if getattr(args, "regex", None) is not None:
        return "--regex", {"regex": args.regex}
    if getattr(args, "choice", None) is not None:
        return "--choice", {"choice": args.choice}
    return None, None


def _flag(option):
    return "--stop" if option == "stop_strings" else "--" + option.replace("_", "-")


def _sampler_options(sampler, options):
    """The decoding-mode options `--sampler NAME` stands for."""
    if sampler is None:
        return {}
    if sampler == "greedy":
        return {"do_sample": False}
    if sampler == "beam":
        return {"num_beams": options.get("num_beams", 4)}
    if sampler == "contrastive":
        return {
            "penalty_alpha": options.get("penalty_alpha", 0.6),
            "top_k": options.get("top_k", 4),
        }
    return {"do_sample": True}


def _first_line(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def read_prompt(prompt):
    if prompt == "-":
        try:
            # Bytes, decoded here: a bad byte is the user's error, not ours.
            binary = getattr(sys.stdin, "buffer", None)
            prompt = sys.stdin.read() if binary is None else binary.read().decode()
        except UnicodeDecodeError as error:
            raise UsageError(
                f"the prompt on stdin is not UTF-8 text ({error})"
            ) from None
    if not prompt:
        raise UsageError("the prompt is empty")
    return prompt


def _check_tokenizer(model):
    """Before the weights load: the commands take and print text."""
    if os.path.isdir(model) and not os.path.isfile(
        os.path.join(model, "tokenizer.json")
    ):
        raise UsageError(f"--model {model!r} has no tokenizer.json")


def run_generate(args):
    prompt = read_prompt(args.prompt)
    options = generation_options(args)
    started = time.perf_counter()
    _check_tokenizer(args.model)
    lm = load_model(args.model, args.dtype, args.lora)
    config = lm.generation_config.merge(options)
    if config.max_new_tokens is None and config.max_length is None:
        options = options.replace(max_new_tokens=DEFAULT_MAX_NEW_TOKENS)
        config = config.replace(max_new_tokens=DEFAULT_MAX_NEW_TOKENS)
    prompt_tokens = len(lm.tokenizer.encode(prompt))
    context = lm.backbone.max_sequence_length
    total = config.max_length or prompt_tokens + config.max_new_tokens
    if total > context:
        raise UsageError(
            f"the prompt ({prompt_tokens} tokens) plus {total - prompt_tokens} new "
            f"tokens (--max-new-tokens) exceeds the model's context of "
            f"{context} tokens"
        )
    timing = {"load_seconds": time.perf_counter() - started}
    try:
        record = _generate(lm, prompt, options, args, timing)
    except (ValueError, TypeError) as error:
        raise UsageError(_first_line(error)) from None
    if args.json:
        tokens = record.token_ids[0]
        seconds = timing["generate_seconds"]
        timing["tokens_per_second"] = len(tokens) / max(seconds, 1e-9)
        summary = {
            "model": args.model,
            "backend": _backend(),
            "sampler": config.mode,
            "options": config.to_dict(),
            "prompt": prompt,
            "text": record.text[0],
            "tokens": tokens,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(tokens),
            "finish_reason": record.finish_reasons[0],
            "timing": {k: round(v, 4) for k, v in timing.items()},
        }
        print(json.dumps(summary, ensure_ascii=False))
    return 0


def _generate(lm, prompt, options, args, timing):
    """The `GenerationOutput` of one prompt under the `GenerationConfig`
    `options`, printed as it comes unless `--json` or `--no-stream`; fills
    in `timing`."""
    from keras_gen.streaming import GenerationOutput

    started = time.perf_counter()
    # Structured output prints the structure alone (for `jq` and the like).
    echoed = "" if options.response_format is not None else prompt
    ticker = Ticker(_waiting_for())
    if args.no_stream:
        with ticker:
            record = lm.generate(prompt, options, return_dict=True)
        timing["generate_seconds"] = time.perf_counter() - started
        if not args.json:
            sys.stdout.write(echoed + record.text[0] + "\n")
        return record
    chunks, first_token = _print_stream(
        lm.stream(prompt, options), ticker, echoed, not args.json
    )
    if first_token is not None:
        timing["first_token_seconds"] = first_token
    timing["generate_seconds"] = time.perf_counter() - started
    return GenerationOutput.join(chunks)


def _print_stream(stream, ticker, echoed="", shown=True):
    """Print a stream's text on stdout as it comes (after `echoed`), with
    `ticker` counting the wait until then; `(chunks, seconds to the first
    token or None)`.

    The text goes out once the progress line is gone: after the second
    chunk of tokens (torch compiles its loop step after the prompt's first
    token), or at the end.
    """
    started = time.perf_counter()
    held, chunks, with_tokens, first_token = [echoed], [], 0, None
    with ticker:
        for chunk in stream:
            if chunk.token_ids[0]:
                if first_token is None:
                    first_token = time.perf_counter() - started
                with_tokens += 1
            chunks.append(chunk)
            held.append(chunk.text[0])
            if with_tokens >= 2:
                ticker.stop()
                if shown:
                    sys.stdout.write("".join(held))
                    sys.stdout.flush()
                held = []
    if shown:
        sys.stdout.write("".join(held) + "\n")
        sys.stdout.flush()
    return chunks, first_token


def _waiting_for():
    """What a wait for the first tokens is spent on, as a `Ticker` text:
    compiling once a program is traced (or loading it, where a compilation
    cache keeps programs)."""
    from keras_gen import backend

    traces, cache = backend.trace_count(), backend.compilation_cache_dir()

    def describe():
        if backend.trace_count() == traces:
            return "waiting for the first tokens"
        if cache is None:
            return "compiling the program"
        return f"compiling the program (or loading it from {cache})"

    return describe


def _system_message(args):
    if args.system_file is None:
        return args.system
    try:
        with open(args.system_file, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--system-file {args.system_file}: {error}") from None


CHAT_COMMANDS = "/clear starts over, /exit (or Ctrl-D) leaves"


def run_chat(args):
    from keras_gen.generation.chat_session import ChatSession

    options = generation_options(args)
    system = _system_message(args)
    _check_tokenizer(args.model)
    lm = load_model(args.model, args.dtype, args.lora)
    try:
        session = ChatSession(lm, system=system, generation_config=options)
    except (TypeError, ValueError) as error:
        raise UsageError(_first_line(error)) from None
    terminal = sys.stdin.isatty()
    if terminal:
        try:
            import readline  # noqa: F401 (line editing and history for input())
        except ImportError:
            pass
        say(f"chatting with {args.model}: {CHAT_COMMANDS}")
    failed = False
    while True:
        try:
            line = input("> " if terminal else "").strip()
        except EOFError:
            return 1 if failed else 0
        if line in ("/exit", "/quit"):
            return 1 if failed else 0
        if line == "/clear":
            session.clear()
            say("the conversation starts over")
            continue
        if line.startswith("/"):
            say(f"unknown command {line.split()[0]}: {CHAT_COMMANDS}")
            continue
        if not line:
            continue
        dropped = session.dropped
        try:
            _print_stream(session.stream(line), Ticker(_waiting_for()))
        except (TypeError, ValueError) as error:
            say(f"error: {_first_line(error)}")
            failed = True
        except KeyboardInterrupt:  # ends this reply, not the chat
            sys.stdout.write("\n")
            if not terminal:
                raise
        if session.dropped > dropped:
            say(
                f"the oldest {session.dropped - dropped} messages were dropped "
                "to fit the model's context"
            )


def _backend():
    import keras

    return keras.config.backend()


def run_serve(args):
    try:
        from keras_gen import serving
    except ImportError as error:
        print(
            f"keras-gen serve needs the serving extra ({error.name} is "
            "missing): pip install 'keras-gen[serve]'",
            file=sys.stderr,
        )
        return 1
    import uvicorn

    processors = _import_processors(args.processors)
    lm = load_model(args.model, args.dtype, args.lora)
    draft = args.draft_model and load_model(args.draft_model, args.dtype)
    try:
        app = serving.create_app(
            lm,
            logits_processors=processors,
            model_name=args.model_name or args.model,
            max_batch_size=args.max_batch_size,
            max_length=args.max_length,
            max_queue=args.max_queue,
            warm_up={"background": "background", "wait": True, "off": False}[
                args.warm_up
            ],
            prefix_cache_bytes=args.prefix_cache_bytes,
            prefill_chunk_tokens=args.prefill_chunk_tokens,
            prefill_pause=args.prefill_pause,
            num_speculative_tokens=args.num_speculative_tokens,
            draft_model=draft,
        )
    except (TypeError, ValueError) as error:
        raise UsageError(_first_line(error)) from None
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def benchmark_script():
    """`tools/benchmark.py` of the source checkout keras_gen comes from."""
    package = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(package), "tools", "benchmark.py")


def run_bench(args):
    script = benchmark_script()
    if not os.path.isfile(script):
        print(
            f"keras-gen bench: error: {script} not found; the benchmark ships "
            "with the source checkout, not the installed package",
            file=sys.stderr,
        )
        return 1
    extra = [a for a in args.args if a != "--"]
    return subprocess.call([sys.executable, script, *extra], env=dict(os.environ))


COMMANDS = {
    "generate": run_generate,
    "chat": run_chat,
    "serve": run_serve,
    "bench": run_bench,
}


def main(argv=None):
    parser = build_parser()
    # `bench` passes arguments it does not know on to the benchmark.
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "bench":
        _subparser(parser, args.command).unknown(unknown)
    if args.command == "bench":
        args.args = [*args.args, *unknown]
    if getattr(args, "no_compilation_cache", False):
        os.environ["KERAS_GEN_COMPILATION_CACHE"] = "0"
    try:
        backend = select_backend(getattr(args, "backend", None))
        if backend == "tensorflow" and not getattr(args, "verbose", True):
            _import_quietly("tensorflow")
        return COMMANDS[args.command](args)
    except UsageError as error:
        print(f"keras-gen {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
