"""The chat page at `GET /`, in headless Chromium: a message sent, the
streamed answer shown."""

import shutil

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
webdriver = pytest.importorskip("selenium.webdriver")

from keras_gen.serving import create_app  # noqa: E402
from tests.serving.openai_app_test import MODEL  # noqa: E402
from tests.serving.openai_app_test import running  # noqa: E402
from tests.text_models import tiny_text_lm  # noqa: E402

pytestmark = pytest.mark.only_backend("jax")
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


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


@pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)
def test_a_message_gets_its_streamed_answer(client):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(flag)
    browser = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=DRIVER)
    )
    try:
        browser.get(str(client.base_url) + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_element(By.ID, "model").text == MODEL)
        for field, value in (("temperature", "0"), ("max_tokens", "8")):
            element = browser.find_element(By.ID, field)
            element.clear()
            element.send_keys(value)
        browser.find_element(By.ID, "input").send_keys("What is a class?")
        browser.find_element(By.ID, "send").click()
        done = "#log .assistant[data-state='done'] span"
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, done))
        shown = browser.execute_script(
            f'return document.querySelector("{done}").textContent'
        )
        assert not browser.find_elements(By.CSS_SELECTOR, "#log .error")
    finally:
        browser.quit()
    messages = [{"role": "user", "content": "What is a class?"}]
    body = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 8}
    answer = client.post("/v1/chat/completions", json={**body, "top_p": 1}).json()
    assert shown == answer["choices"][0]["message"]["content"] != ""
