"""The chat page in a real browser (Debian's headless Chromium driven by Playwright) against
real `mlxd serve` processes: model picker, streaming, reasoning, stop, API key, image attach,
and a page from another origin that must not drive the server.

No browser download: Playwright launches /usr/bin/chromium (`.ci/run` installs it). A missing
browser fails these tests rather than skipping them.
"""

from __future__ import annotations

import base64
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env, wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
STEP_MS = 120_000  # liveness bound per browser wait on a busy 2-core machine
# A 1x1 PNG (red pixel) to attach.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "chromium is not installed (apt-get install -y chromium)"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    p = context.new_page()
    p.set_default_timeout(STEP_MS)
    yield p
    context.close()


def ask(page: Any, text: str, model: str, max_tokens: int | None = 8) -> None:
    page.wait_for_selector(f"#model option[value='{model}']", state="attached")
    page.select_option("#model", model)
    page.fill("#max-tokens", "" if max_tokens is None else str(max_tokens))
    page.fill("#prompt", text)
    page.click("#send")


def wait_idle(page: Any) -> None:
    page.wait_for_selector("body[data-state='idle']", state="attached")


def running(server: ServerProcess) -> float:
    return metric(httpx.get(server.url + "/metrics", timeout=30).text, "mlxd_running_requests")


def test_page_streams_an_answer_and_keeps_history(page: Any, server: ServerProcess) -> None:
    page.goto(server.url + "/")
    ask(page, "Hello there", server.model)
    wait_idle(page)
    answer = page.locator(".msg.assistant").last
    assert answer.locator(".text").inner_text().strip(), "no streamed text"
    assert "error" not in (answer.get_attribute("class") or "")
    assert "tokens/s" in page.inner_text("#stats")
    ask(page, "And again", server.model)  # a second turn sends the first one along
    wait_idle(page)
    assert page.locator(".msg.user").count() == 2 and page.locator(".msg.assistant").count() == 2
    assert page.evaluate("turns.length") == 4


def test_reasoning_is_shown_collapsed(page: Any, server: ServerProcess) -> None:
    page.goto(server.url + "/")
    ask(page, "Think first", "scripted-think", max_tokens=None)
    wait_idle(page)
    box = page.locator(".msg.assistant details.reasoning")
    assert box.get_attribute("open") is None
    assert "First I think." in box.locator(".thoughts").text_content()
    assert "Answer!" in page.locator(".msg.assistant > .text").inner_text()


def test_stop_aborts_and_the_server_cancels(page: Any, server: ServerProcess) -> None:
    page.goto(server.url + "/")
    ask(page, "Talk for a long time", "tiny-long", max_tokens=50_000)
    page.wait_for_selector(".msg.assistant .text:not(:empty)")
    assert running(server) >= 1
    page.click("#stop")
    wait_idle(page)
    wait_for(lambda: running(server) == 0, "the server to cancel the stopped answer")
    assert page.inner_text("#stats") == "stopped"
    assert page.evaluate("turns.length") == 2  # the partial answer stays in the chat


def test_a_refused_request_shows_the_server_message(page: Any, server: ServerProcess) -> None:
    page.goto(server.url + "/")
    ask(page, "word " * 400, "tiny-short")  # longer than its 128-token window: 400
    wait_idle(page)
    failed = page.locator(".msg.assistant.error")
    assert failed.inner_text().startswith("Error 400: "), failed.inner_text()
    assert "context" in failed.inner_text().lower()
    assert page.evaluate("turns.length") == 0  # the failed turn can be sent again


def test_the_system_prompt_leads_every_request(page: Any, server: ServerProcess) -> None:
    page.goto(server.url + "/")
    page.wait_for_selector("#model option", state="attached")
    page.click("#system-box summary")
    page.fill("#system", "Answer in French.")
    page.fill("#max-tokens", "3")
    body = page.evaluate("JSON.parse(requestBody())")
    assert body["messages"] == [{"role": "system", "content": "Answer in French."}]
    assert body["max_tokens"] == 3 and body["stream"] and body["stream_options"]


def test_model_text_cannot_inject_markup(page: Any, server: ServerProcess) -> None:
    page.goto(server.url + "/")
    page.wait_for_selector("#model option", state="attached")
    page.evaluate(
        "renderText(document.querySelector('#log'), "
        "'<img src=x onerror=window.pwned=1> ```py\\n<b>x</b>\\n``` tail')"
    )
    assert page.locator("#log img").count() == 0 and page.locator("#log b").count() == 0
    assert page.locator("#log pre code").text_content() == "<b>x</b>\n"
    assert page.evaluate("window.pwned") is None


@pytest.fixture(scope="module")
def keyed_server(tiny_chat_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(tiny_chat_model), "--api-key", "s3cret"], server_env(server_home))
    yield srv
    srv.stop()


def test_api_key_prompt_then_chat(page: Any, keyed_server: ServerProcess) -> None:
    page.goto(keyed_server.url + "/")
    page.wait_for_selector("#keybox:not([hidden])")
    assert "API key" in page.inner_text("#notice")
    page.fill("#key", "s3cret")
    page.click("#keysave")
    ask(page, "Hello", keyed_server.model)
    wait_idle(page)
    assert "error" not in (page.locator(".msg.assistant").last.get_attribute("class") or "")
    assert page.evaluate("sessionStorage.getItem('mlxd-api-key')") == "s3cret"
    assert page.evaluate("localStorage.length") == 0


def test_wrong_key_shows_a_clear_error(page: Any, keyed_server: ServerProcess) -> None:
    page.goto(keyed_server.url + "/")
    page.evaluate("sessionStorage.setItem('mlxd-api-key', 'wrong')")
    page.reload()
    page.wait_for_selector("#keybox:not([hidden])")
    assert "API key" in page.inner_text("#notice")


class _EvilPage(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        script = f"""<script>
window.results = [];
const body = JSON.stringify({{messages: [{{role: "user", content: "hi"}}], max_tokens: 2}});
const tries = [
  fetch("{self.target}/v1/models").then(r => "read " + r.status),
  fetch("{self.target}/v1/chat/completions", {{method: "POST", body,
    headers: {{"Content-Type": "application/json"}}}}).then(r => "read " + r.status),
  fetch("{self.target}/v1/chat/completions", {{method: "POST", body, mode: "no-cors",
    headers: {{"Content-Type": "text/plain"}}}}).then(r => "opaque " + r.type),
];
Promise.allSettled(tries).then(all => {{
  window.results = all.map(r => r.status === "fulfilled" ? r.value : "blocked");
}});
</script>"""
        data = script.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_a_page_from_another_origin_cannot_drive_the_server(
    page: Any, server: ServerProcess
) -> None:
    handler = type("Evil", (_EvilPage,), {"target": server.url})
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        before = httpx.get(server.url + "/metrics", timeout=30).text
        page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        page.wait_for_function("() => window.results.length === 3")
        results = page.evaluate("window.results")
    finally:
        evil.shutdown()
        evil.server_close()
    assert results[:2] == ["blocked", "blocked"]  # no CORS grant: the page reads nothing
    assert results[2] == "opaque opaque"  # the simple POST went out...
    after = httpx.get(server.url + "/metrics", timeout=30).text
    refused = 'mlxd_http_requests_total{route="/v1/chat/completions",status="403"}'
    assert metric(after, refused) >= metric(before, refused) + 2  # ...and was refused
    ok = 'mlxd_http_requests_total{route="/v1/chat/completions",status="200"}'
    assert metric(after, ok) == metric(before, ok)


@pytest.fixture(scope="module")
def vision_server(tiny_vision_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(tiny_vision_model)], server_env(server_home))
    yield srv
    srv.stop()


def test_image_attach_on_a_vision_model(
    page: Any, vision_server: ServerProcess, tmp_path: Path
) -> None:
    image = tmp_path / "dot.png"
    image.write_bytes(PNG)
    page.goto(vision_server.url + "/")
    page.set_input_files("#image", str(image))
    page.wait_for_selector("#attached img")
    ask(page, "What is this?", vision_server.model)
    wait_idle(page)
    assert page.locator(".msg.user img").get_attribute("src").startswith("data:image/png;base64,")
    assert "error" not in (page.locator(".msg.assistant").last.get_attribute("class") or ""), (
        page.locator(".msg.assistant").last.inner_text()
    )
    sent = page.evaluate("turns[0].content")
    assert sent[1]["type"] == "image_url"
