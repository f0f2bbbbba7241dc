"""The documentation's Python and shell blocks run as written.

A page's blocks run in order, as a reader would type them into one session
and one terminal, from a fresh folder (with `tools/` and `examples/` linked
in, as in a checkout): Python blocks in one namespace, shell blocks with
bash (`-e -o pipefail`), so a shell block can use a file a Python block
wrote. A block right after a `<!-- not run: REASON -->` comment is skipped
(it installs packages, needs a download, eight accelerators or minutes);
the reason is in the page's source. A shell block after
`<!-- in the background: REASON -->` starts a server: it runs in the
background until the page ends, the blocks after it wait for its
`/health`, and its port (8000 in the docs) becomes a free one in every
block; `curl` fails on an HTTP error status (`--fail-with-body`), so a
request the server refuses fails its block. torch runs eagerly here (`KERAS_GEN_TORCH_COMPILER=none`), so that
a `--backend torch` line takes seconds instead of a compile's minute.
Shell blocks and servers share one compilation cache over the pages, as a
reader's commands share theirs (on by default): the same demo programs are
compiled once, not once per `keras-gen` line.
"""

import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(<!-- (?P<mark>not run|in the background): (?P<reason>.+?) -->\s*)?"
    r"```(?P<language>python|bash)\n(?P<code>.*?)```",
    re.S,
)
DOCS_PORT = "8000"
# Before each shell block: an HTTP error status fails the block.
SHELL_PRELUDE = 'curl() { command curl --fail-with-body "$@"; }\n'
SHELL_TIMEOUT = 600


def blocks(text):
    """`(line, language, code, mark)` of each Python and shell block; `mark`
    is None, "not run" or "in the background"."""
    for match in BLOCK.finditer(text):
        line = text[: match.start("code")].count("\n") + 1
        yield line, match["language"], match["code"], match["mark"]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


class Page:
    """Runs one page's blocks in order; `close()` stops its servers."""

    def __init__(self, name, folder, compilation_cache=None):
        self.name, self.folder = name, folder
        self.namespace = {"__name__": "__main__"}
        self.port = free_port()
        self.servers = []
        self.environment = {
            **os.environ,
            "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}",
            "KERAS_GEN_TORCH_COMPILER": "none",
        }
        if compilation_cache is not None:
            self.environment["KERAS_GEN_COMPILATION_CACHE"] = str(compilation_cache)

    def run(self, line, language, code, mark):
        code = re.sub(rf"\b{DOCS_PORT}\b", self.port, code)
        where = f"{self.name}, the block at line {line}"
        if mark == "in the background":
            self.start_server(code, where)
        elif language == "python":
            try:
                exec(compile(code, f"{self.name}:{line}", "exec"), self.namespace)
            except Exception as error:
                pytest.fail(f"{where}: {type(error).__name__}: {error}")
        else:
            result = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", SHELL_PRELUDE + code],
                cwd=self.folder,
                env=self.environment,
                capture_output=True,
                text=True,
                timeout=SHELL_TIMEOUT,
            )
            if result.returncode != 0:
                pytest.fail(
                    f"{where} exited with {result.returncode}:\n"
                    f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
                )

    def start_server(self, code, where):
        log = open(self.folder / f"server-{len(self.servers)}.log", "w")
        server = subprocess.Popen(
            ["bash", "-c", f"exec {code.strip()}"],
            cwd=self.folder,
            env=self.environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.servers.append((server, log))
        deadline = time.monotonic() + SHELL_TIMEOUT
        while time.monotonic() < deadline and server.poll() is None:
            try:
                urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/health", timeout=5
                )
                return
            except urllib.error.HTTPError:  # it answers
                return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"{where}: the server did not answer /health:\n{log.name}")

    def close(self):
        for server, log in self.servers:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
                    server.wait()
            log.close()


def run_page(text, name, folder, compilation_cache=None):
    """Run `text`'s blocks in order; fail naming the first that fails."""
    page = Page(name, folder, compilation_cache)
    try:
        for line, language, code, mark in blocks(text):
            if mark != "not run":
                page.run(line, language, code, mark)
    finally:
        page.close()


@pytest.fixture(scope="module")
def compilation_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("compilation")


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_block_runs(page, tmp_path, monkeypatch, compilation_cache):
    for folder in ("tools", "examples"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(tmp_path)  # as a session started there
    text = page.read_text(encoding="utf-8")
    run_page(text, page.name, tmp_path, compilation_cache)


@pytest.mark.only_backend("jax")
def test_a_failing_block_fails_the_page(tmp_path):
    page = (
        "```python\nx = 1\n```\n\n<!-- not run: a demo -->\n```python\nimport nothing\n```\n"
        "```bash\ntest -d .\n```\n"
    )
    run_page(page, "page.md", tmp_path)
    with pytest.raises(
        pytest.fail.Exception, match=r"page.md, the block at line 13: NameError"
    ):
        run_page(page + "```python\nx = y\n```\n", "page.md", tmp_path)
    with pytest.raises(
        pytest.fail.Exception, match=r"page.md, the block at line 13 exited with 1"
    ):
        run_page(page + "```bash\nfalse\necho never\n```\n", "page.md", tmp_path)


@pytest.mark.only_backend("jax")
def test_a_background_block_is_stopped_with_the_page(tmp_path):
    page = (
        "<!-- in the background: a server -->\n```bash\n"
        f"{sys.executable} -m http.server -b 127.0.0.1 -d {tmp_path} {DOCS_PORT}\n```\n"
        "```bash\nnot-a-command\n```\n"
    )
    with pytest.raises(pytest.fail.Exception, match="exited with 127"):
        run_page(page, "page.md", tmp_path)
    assert not [
        command
        for command in pathlib.Path("/proc").glob("[0-9]*/cmdline")
        if f"http.server -b 127.0.0.1 -d {tmp_path}" in _read(command)
    ]


def _read(cmdline):
    """A process's command line (arguments joined by spaces), or "" if it
    ended meanwhile."""
    try:
        return cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def anchors(text):
    """GitHub's anchors of a page's headings (outside its code blocks)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", prose, re.M)
    }


LINK = re.compile(r"\]\((?!https?:)(?P<path>[^)#\s]*)(?:#(?P<anchor>[^)\s]+))?\)")


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_leads_somewhere(page):
    text = page.read_text(encoding="utf-8")
    for match in LINK.finditer(text):
        target = (page.parent / match["path"]).resolve() if match["path"] else page
        assert target.exists(), f"{page.name}: {match[0]} leads nowhere"
        if match["anchor"] and target.suffix == ".md":
            assert match["anchor"] in anchors(target.read_text(encoding="utf-8")), (
                f"{page.name}: {match[0]} names no heading of {target.name}"
            )
