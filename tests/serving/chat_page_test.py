"""The chat page at `GET /`, in headless Chromium: a message sent, the
streamed answer shown. The browser is driven through chromedriver's W3C
WebDriver protocol (plain HTTP, with httpx)."""

import contextlib
import shutil
import subprocess
import time

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from keras_gen.serving import create_app  # noqa: E402
from tests.serving.openai_app_test import MODEL  # noqa: E402
from tests.serving.openai_app_test import free_port  # noqa: E402
from tests.serving.openai_app_test import running  # noqa: E402
from tests.text_models import tiny_text_lm  # noqa: E402

pytestmark = pytest.mark.only_backend("jax")
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
QUESTION = "What is a class?"


@pytest.fixture(scope="module")
def client():
    app = create_app(tiny_text_lm(), model_name=MODEL, max_batch_size=2)
    with running(app) as client:
        yield client


def test_the_page_needs_nothing_from_elsewhere(client):
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "http://" not in page and "https://" not in page and " src=" not in page


@contextlib.contextmanager
def browser():
    """A headless Chromium session: a function that runs a script in the
    page and returns its value."""
    port = free_port()
    driver = subprocess.Popen(
        [DRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                http.get("/status")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "chromedriver did not start"
                time.sleep(0.2)
        options = {"binary": CHROMIUM, "args": ["--headless=new", "--no-sandbox"]}
        capabilities = {"alwaysMatch": {"goog:chromeOptions": options}}
        session = http.post("/session", json={"capabilities": capabilities}).json()
        path = f"/session/{session['value']['sessionId']}"

        def page(script=None, url=None):
            if url is not None:
                return http.post(f"{path}/url", json={"url": url}).json()["value"]
            answer = http.post(
                f"{path}/execute/sync", json={"script": script, "args": []}
            )
            return answer.json()["value"]

        yield page
        http.delete(path)
    finally:
        http.close()
        driver.kill()
        driver.wait(30)


def wait_for(page, script, seconds=60):
    deadline = time.monotonic() + seconds
    while not page(script):
        assert time.monotonic() < deadline, script
        time.sleep(0.2)


@pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)
def test_a_message_gets_its_streamed_answer(client):
    with browser() as page:
        page(url=str(client.base_url) + "/")
        wait_for(
            page, f"return document.getElementById('model').textContent == '{MODEL}'"
        )
        page(
            "document.getElementById('temperature').value = '0';"
            "document.getElementById('max_tokens').value = '8';"
            f"document.getElementById('input').value = '{QUESTION}';"
            "document.getElementById('send').click();"
        )
        done = "#log .assistant[data-state='done'] span"
        wait_for(page, f'return document.querySelector("{done}") !== null')
        shown = page(f'return document.querySelector("{done}").textContent')
        assert page("return document.querySelectorAll('#log .error').length") == 0
        assert page("return document.querySelector('#log .user span').textContent") == (
            QUESTION
        )
    messages = [{"role": "user", "content": QUESTION}]
    body = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 8}
    answer = client.post("/v1/chat/completions", json={**body, "top_p": 1}).json()
    assert shown == answer["choices"][0]["message"]["content"] != ""
