"""The `keras-gen` command, in process and as `python -m keras_gen`."""

import io
import json
import os
import re
import select
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import keras_gen
from keras_gen import cli
from tests.markers import ON_TORCH_ONLY
from tests.text_models import save_tiny_text_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "The for statement"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_model")
    lm = save_tiny_text_model(path)
    return str(path), lm


def run(capsys, *argv):
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def command(*argv, env=None, timeout=600, stdin=None):
    """`python -m keras_gen ...` in a subprocess, from the repository root."""
    env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "keras_gen", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
        input=stdin,
    )


@pytest.mark.parametrize("name", ["generate", "serve", "bench"])
def test_help(capsys, name):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--backend" in out
    if name == "generate":
        for flag in ("--sampler", "--top-k", "--stop", "--no-stream", "--json"):
            assert flag in out


def test_version_and_global_help(capsys):
    from keras_gen import __version__

    for argv, expected in (
        (["--version"], f"keras-gen {__version__}"),
        (["--help"], "--backend"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 0 and expected in capsys.readouterr().out


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for shown in (
        "--host HOST the address",
        "(default: 127.0.0.1)",
        "(default: 8000)",
        "(default: 8)",
        "(default: 256)",
    ):
        assert shown in out
    assert "(default: True)" not in out and "(default: None)" not in out
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"generation_config.json, else {cli.DEFAULT_MAX_NEW_TOKENS})" in out


def test_stop_does_not_swallow_the_prompt():
    args = cli.build_parser().parse_args(
        ["generate", "--stop", ".", "--stop", "!", "hi"]
    )
    assert args.prompt == "hi" and args.stop == [".", "!"]


@pytest.mark.parametrize(
    "model, hint",
    [
        ("gpt2", "huggingface-cli download gpt2 --local-dir gpt2"),
        ("Qwen/Qwen3-0.6B", "--local-dir Qwen3-0.6B`), then pass the folder"),
        ("./missing/model", None),
    ],
)
def test_hub_ids_get_a_download_hint(capsys, model, hint):
    status, _, err = run(capsys, "generate", "x", "--model", model)
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert ("does not download" in err) == (hint is not None)
    assert hint is None or hint in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate"], "required: prompt"),
        (["generate", "x", "--max-new-tokns", "3"], "(did you mean --max-new-tokens?)"),
        (["serve", "--prot", "1"], "(did you mean --port?)"),
        (["generate", "x", "--bogus"], "unrecognized arguments: --bogus"),
        (["generate", "x", "--top-k", "1.5"], "'1.5' is not an integer"),
        (["generate", "x", "--temperature", "hot"], "'hot' is not a number"),
        (["generate", "x", "--sampler", "magic"], "invalid choice: 'magic'"),
        (["generate", "x", "--backend", "numpy"], "invalid choice: 'numpy'"),
        (["serve", "--port", "99999"], "--port"),
        (["serve", "--prefill-pause", "nan"], "'nan' is not a number"),
        (["serve", "--prefill-pause", "-1"], "-1 must be >= 0"),
        (["serve", "--processor", "boost"], "'boost' is not NAME=MODULE:CLASS"),
        (["generate", "x", "--choice", "a", "--regex", "b"], "not allowed with"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert message in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--top-k", "-1"], "--top-k must be in [0, 2147483647]"),
        (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
        (["--temperature", "nan"], "--temperature must be finite"),
        (["--repetition-penalty", "0"], "--repetition-penalty: `penalty` must be in"),
        (
            [
                "--sampler",
                "beam",
                "--num-beams",
                "2",
                "--top-k",
                "3",
                "--penalty-alpha",
                "0.5",
            ],
            "exclude each other",
        ),
    ],
)
def test_bad_option_values_exit_2_naming_the_flag(capsys, argv, message):
    # Checked by `GenerationConfig`, before any model loads.
    status, _, err = run(capsys, "generate", "x", "--model", "/no/such/model", *argv)
    assert status == 2
    assert len(err.strip().splitlines()) == 1, err
    assert message in err


def test_a_processor_that_does_not_import_is_a_usage_error(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "boosts.py").write_text("X = 1\n")
    status, _, err = run(capsys, "serve", "--processor", "b=no_such_module_xyz:B")
    assert status == 2
    assert "--processor b=no_such_module_xyz:B: cannot import no_such_module_xyz" in err
    status, _, err = run(capsys, "serve", "--processor", "b=boosts:Boost")
    assert status == 2
    assert "boosts has no Boost" in err


def test_a_folder_without_a_tokenizer_is_refused_before_loading(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{}")  # never read: refused first
    status, _, err = run(capsys, "generate", "x", "--model", str(tmp_path))
    assert status == 2
    assert "has no tokenizer.json" in err


def test_missing_model_folder_names_the_path(capsys, tmp_path):
    missing = str(tmp_path / "no_such_model")
    status, _, err = run(capsys, "generate", "x", "--model", missing)
    assert status == 2
    assert missing in err and len(err.strip().splitlines()) == 1


def test_prompt_too_long_for_the_context(capsys, model_folder):
    path, _ = model_folder
    status, _, err = run(
        capsys, "generate", PROMPT, "--model", path, "--max-new-tokens", "1000"
    )
    assert status == 2 and "context" in err


def test_json_output_matches_generate(capsys, model_folder):
    path, lm = model_folder
    status, out, _ = run(
        capsys, "generate", PROMPT, "--model", path, "--max-new-tokens", "6", "--json"
    )
    assert status == 0
    record = json.loads(out)
    expected = lm.generate(PROMPT, max_new_tokens=6, return_dict=True)
    assert record["text"] == expected.text[0]
    assert record["tokens"] == expected.token_ids[0]
    assert record["finish_reason"] == expected.finish_reasons[0]
    assert record["sampler"] == "greedy"
    assert record["prompt_tokens"] == len(lm.tokenizer.encode(PROMPT))
    assert set(record["timing"]) >= {
        "load_seconds",
        "first_token_seconds",
        "generate_seconds",
        "tokens_per_second",
    }


def test_lora_adapter_is_merged_in(capsys, model_folder, tmp_path):
    path, _ = model_folder
    from keras_gen.models import CausalLM
    from keras_gen.training import lora

    adapted = CausalLM.from_pretrained(path)
    adapted.backbone.enable_lora(2, target_modules="all-linear")
    for layer in lora.adapted(adapted.backbone):
        layer.lora_kernel_b.assign(np.full(layer.lora_kernel_b.shape, 0.3, "float32"))
    adapted.save_lora(tmp_path / "adapter")
    options = ("--max-new-tokens", "6", "--json")
    status, out, err = run(
        capsys,
        "generate",
        PROMPT,
        "--model",
        path,
        "--lora",
        str(tmp_path / "adapter"),
        *options,
    )
    assert status == 0 and "with the adapter" in err
    expected = adapted.generate(PROMPT, max_new_tokens=6, return_dict=True)
    assert json.loads(out)["tokens"] == expected.token_ids[0]
    status, _, err = run(
        capsys, "generate", PROMPT, "--model", path, "--lora", str(tmp_path)
    )
    assert status == 2 and err.count("\n") == 1 and "--lora" in err


def test_structured_output_flags(capsys, model_folder, tmp_path):
    path, lm = model_folder
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["n"],
    }
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))
    base = ("generate", PROMPT, "--model", path, "--max-new-tokens", "30")
    for flags, check in (
        (["--json-schema", str(schema_file)], lambda t: json.loads(t)["n"] < 10),
        (["--regex", "[a-z]{3}!"], lambda t: len(t) == 4 and t.endswith("!")),
        (["--choice", "yes", "no"], lambda t: t in ("yes", "no")),
    ):
        status, out, _ = run(capsys, *base, "--json", *flags)
        record = json.loads(out)
        assert status == 0 and check(record["text"]), (flags, record)
        assert record["finish_reason"] == "stop"
    status, out, _ = run(capsys, *base, "--json", "--json-schema", str(schema_file))
    expected = lm.generate(PROMPT, max_new_tokens=30, response_format={"json": schema})
    assert PROMPT + json.loads(out)["text"] == expected
    # Without --json: the structure alone, for `jq`.
    for flags in ([], ["--no-stream"]):
        status, out, _ = run(capsys, *base, "--json-schema", str(schema_file), *flags)
        assert status == 0 and json.loads(out) == json.loads(expected[len(PROMPT) :])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--regex", "("], "--regex: `pattern` '('"),
        (["--json-schema", "/no/such.json"], "--json-schema /no/such.json"),
    ],
    ids=["regex", "missing-file"],
)
def test_bad_structured_output_flags_exit_2(capsys, argv, message):
    status, _, err = run(capsys, "generate", "x", "--model", "/no/such/model", *argv)
    assert status == 2 and message in err
    assert len(err.strip().splitlines()) == 1, err


def test_streamed_and_plain_output_agree(capsys, model_folder):
    path, lm = model_folder
    expected = lm.generate(PROMPT, max_new_tokens=6)
    for flags in ([], ["--no-stream"]):
        status, out, _ = run(
            capsys, "generate", PROMPT, "--model", path, "--max-new-tokens", "6", *flags
        )
        assert status == 0
        assert out == expected + "\n"


@ON_TORCH_ONLY
def test_prompt_from_stdin_and_options(capsys, model_folder, monkeypatch):
    path, lm = model_folder
    options = "--max-new-tokens 6 --json --sampler top_k --top-k 3 --temperature 0.7"
    options = [*options.split(), "--seed", "3", "--repetition-penalty", "1.3"]
    options += ["--stop", "zzz", "--stop", "qqq", "--model", path]
    monkeypatch.setattr(sys, "stdin", io.StringIO(PROMPT))
    status, out, _ = run(capsys, "generate", "-", *options)
    assert status == 0
    record = json.loads(out)
    assert record["prompt"] == PROMPT and record["sampler"] == "sample"
    assert record["options"]["top_k"] == 3 and record["options"]["temperature"] == 0.7
    # The prompt as an argument, streamed or not: the same tokens.
    for flags in ([], ["--no-stream"]):
        status, again, _ = run(capsys, "generate", PROMPT, *options, *flags)
        assert json.loads(again)["tokens"] == record["tokens"]


def test_backend_flag_before_the_command(capsys, model_folder):
    import keras

    path, _ = model_folder
    backend = keras.config.backend()
    status, out, _ = run(
        capsys,
        "--backend",
        backend,
        "generate",
        PROMPT,
        "--model",
        path,
        "--max-new-tokens",
        "2",
        "--json",
    )
    assert status == 0 and json.loads(out)["backend"] == backend
    other = "jax" if backend != "jax" else "torch"
    status, _, err = run(capsys, "generate", PROMPT, "--backend", other)
    assert status == 2 and "already loaded" in err


def test_bench_runs_the_benchmark_script(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "benchmark_script", lambda: str(tmp_path / "missing.py"))
    status, _, err = run(capsys, "bench")
    assert status == 1 and "missing.py" in err
    script = tmp_path / "benchmark.py"
    script.write_text("import sys\nsys.exit(7 if sys.argv[1:] == ['--quick'] else 0)\n")
    monkeypatch.setattr(cli, "benchmark_script", lambda: str(script))
    assert cli.main(["bench"]) == 0
    assert cli.main(["bench", "--quick"]) == 7


def test_importing_the_command_does_not_load_keras():
    code = "import sys, keras_gen.cli; print('keras' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=120,
    )
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_backend_flag_selects_the_backend(model_folder):
    path, _ = model_folder
    tokens = {}
    for backend in ("jax", "tensorflow", "torch"):
        result = command(
            "generate",
            PROMPT,
            "--model",
            path,
            "--max-new-tokens",
            "5",
            "--json",
            "--backend",
            backend,
            env={"KERAS_BACKEND": "tensorflow" if backend != "tensorflow" else "jax"},
        )
        assert result.returncode == 0, result.stderr[-2000:]
        record = json.loads(result.stdout)
        assert record["backend"] == backend
        tokens[backend] = record["tokens"]
    # Same seeded weights on every backend: the same greedy tokens.
    assert tokens["jax"] == tokens["tensorflow"] == tokens["torch"]


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_default_backend_is_jax_and_stdin_works(model_folder):
    path, _ = model_folder
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_gen",
            "generate",
            "-",
            "--model",
            path,
            "--max-new-tokens",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        input=PROMPT,
        cwd=ROOT,
        timeout=600,
        env={**env, "PYTHONPATH": ROOT},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["backend"] == "jax"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.only_backend("jax")
def test_serve_answers_over_http(model_folder):
    pytest.importorskip("fastapi")
    path, lm = model_folder
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_gen",
            "serve",
            "--model",
            path,
            "--model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            # Warm-up is the Engine's (tests/serving); here, the route.
            "--no-warm-up",
            # The model as its own draft: its proposals are all kept.
            "--draft-model",
            path,
        ],
        env={**os.environ, "PYTHONPATH": ROOT},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the server did not come up"
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if json.load(response)["status"] == "ok":
                        break
            except OSError:
                time.sleep(0.5)
        body = json.dumps(
            {"model": "tiny", "prompt": PROMPT, "max_tokens": 5, "temperature": 0}
        ).encode()
        request = urllib.request.Request(
            f"{url}/v1/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            answer = json.load(response)
        expected = lm.generate(PROMPT, max_new_tokens=5, strip_prompt=True)
        assert answer["choices"][0]["text"] == expected
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
            metrics = response.read().decode()
        drafted = re.search(
            r"^keras_gen_speculative_draft_tokens_total (\S+)", metrics, re.M
        )
        accepted = re.search(
            r"^keras_gen_speculative_accepted_tokens_total (\S+)", metrics, re.M
        )
        assert float(drafted[1]) == float(accepted[1]) > 0
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


@pytest.mark.only_backend("jax")
def test_compiled_programs_persist_between_runs(tmp_path):
    # The second process finds the first one's programs in the cache
    # folder, and generates the same greedy tokens.
    cache = tmp_path / "cache"
    argv = (
        "generate",
        PROMPT,
        "--sampler",
        "greedy",
        "--max-new-tokens",
        "4",
        "--json",
    )
    env = {"KERAS_BACKEND": "jax", "KERAS_GEN_COMPILATION_CACHE": str(cache)}
    first = command(*argv, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "loaded demo on jax" in first.stderr
    entries = set(os.listdir(cache / "jax"))
    assert entries
    second = command(*argv, env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads(second.stdout)["tokens"] == json.loads(first.stdout)["tokens"]
    assert set(os.listdir(cache / "jax")) == entries  # nothing compiled anew
    off = command(
        *argv,
        "--no-compilation-cache",
        env={
            "KERAS_BACKEND": "jax",
            "KERAS_GEN_COMPILATION_CACHE": str(tmp_path / "off"),
        },
    )
    assert off.returncode == 0, off.stderr[-2000:]
    assert not (tmp_path / "off").exists()


@pytest.mark.only_backend("torch")
def test_a_terminal_sees_the_compile_counted(tmp_path):
    # Through a pseudo-terminal, as a user sees it: a line counting the
    # seconds, saying it compiles, erased before the text streams.
    import pty

    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "KERAS_GEN_TORCH_COMPILER": "aot_eager",
        "KERAS_GEN_COMPILATION_CACHE": "0",
    }
    argv = [
        sys.executable,
        "-m",
        "keras_gen",
        "--backend",
        "torch",
        "generate",
        PROMPT,
        "--max-new-tokens",
        "6",
        "--sampler",
        "greedy",
    ]
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        argv, stdin=secondary, stdout=secondary, stderr=secondary, env=env, cwd=ROOT
    )
    os.close(secondary)
    shown, timeline, started = b"", [], time.monotonic()
    try:
        while True:
            try:
                data = os.read(primary, 4096)
            except OSError:  # the process closed the terminal
                break
            if not data:
                break
            shown += data
            timeline.append((time.monotonic() - started, shown))
            assert time.monotonic() - started < 300
    finally:
        process.kill() if process.poll() is None else None
        process.wait(30)
        os.close(primary)
    text = shown.decode()
    assert process.returncode == 0, text[-2000:]
    loaded = next(t for t, seen in timeline if b"loaded demo" in seen)
    counted = next(
        t
        for t, seen in timeline
        if b"keras-gen: compiling the program... " in seen
        or b"keras-gen: waiting for the first tokens... " in seen
    )
    assert counted - loaded < 3
    assert "\r\033[Kkeras-gen: compiling the program... " in text
    # Erased, then the prompt and its continuation.
    assert text.rindex("\r\033[K") < text.index(PROMPT)


@pytest.mark.only_backend("tensorflow")
def test_tensorflow_start_up_logs_are_quiet():
    result = command(
        "--backend", "tensorflow", "generate", PROMPT, "--max-new-tokens", "2"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "oneDNN" not in result.stderr and "absl" not in result.stderr
    assert result.stderr.startswith("keras-gen: loaded demo on tensorflow")


CHAT_OPTIONS = dict(max_new_tokens=10, seed=0)


def chat_replies(messages, system=None):
    from keras_gen.generation.chat_session import ChatSession

    session = ChatSession(
        keras_gen.CausalLM.from_preset("demo"), system=system, **CHAT_OPTIONS
    )
    return [session.send(message) for message in messages]


@ON_TORCH_ONLY
def test_chat_on_a_pipe_prints_one_reply_per_line(capsys, monkeypatch, tmp_path):
    system = tmp_path / "system.txt"
    system.write_text("Be brief.")
    monkeypatch.setattr(
        "sys.stdin", io.StringIO("What is a class?\n\n/clear\nHi\nAnd then?\n")
    )
    status, out, err = run(
        capsys, "chat", "--max-new-tokens", "10", "--seed", "0",
        "--system-file", str(system),
    )  # fmt: skip
    assert status == 0, err
    first = chat_replies(["What is a class?"], "Be brief.")
    rest = chat_replies(["Hi", "And then?"], "Be brief.")  # after /clear
    assert out == "".join(reply + "\n" for reply in first + rest)
    assert "the conversation starts over" in err


def test_chat_names_bad_input(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("/help\n" + "word " * 300 + "\n"))
    status, out, err = run(capsys, "chat", "--max-new-tokens", "10")
    assert status == 1  # a message failed; the chat went on to the end
    assert "unknown command /help: /clear starts over" in err
    assert "error: The message takes" in err
    status, _, err = run(capsys, "chat", "--system-file", "/no/such/file")
    assert status == 2 and "--system-file /no/such/file" in err


@pytest.mark.only_backend("jax")
def test_chat_in_a_terminal():
    # Through a pseudo-terminal: the banner, a prompt, a streamed reply that
    # equals the session's, /clear and /exit.
    import pty

    argv = [sys.executable, "-m", "keras_gen", "--backend", "jax", "chat"]
    argv += ["--max-new-tokens", "10", "--seed", "0", "--system", "Be brief."]
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        argv,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env={**os.environ, "PYTHONPATH": ROOT},
        cwd=ROOT,
    )
    os.close(secondary)
    shown = b""

    def read_until(marker, start):
        nonlocal shown
        deadline = time.monotonic() + 120
        while marker not in shown[start:]:
            assert time.monotonic() < deadline, shown.decode()[-2000:]
            ready, _, _ = select.select([primary], [], [], 1)
            if ready:
                shown += os.read(primary, 4096)
        return shown.index(marker, start) + len(marker)

    try:
        at = read_until(b"/exit (or Ctrl-D) leaves", 0)
        at = read_until(b"> ", at)
        os.write(primary, b"What is a class?\n")
        end = read_until(b"\n> ", at)
        os.write(primary, b"/clear\n")
        read_until(b"the conversation starts over", end)
        os.write(primary, b"/exit\n")
        process.wait(60)
    finally:
        process.kill() if process.poll() is None else None
        os.close(primary)
    assert process.returncode == 0
    (reply,) = chat_replies(["What is a class?"], "Be brief.")
    answer = shown[at:end].decode().replace("\r\n", "\n")
    assert answer.split("What is a class?\n", 1)[1].endswith(reply + "\n> ")
