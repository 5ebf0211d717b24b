"""The chat page at / over a fake engine: its files, its headers, --no-web, and the Origin rule
that lets the page's own fetches in (same origin, IP or localhost host) and nobody else."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxd.server.app import create_app
from mlxd.server.origin import same_origin
from mlxd.server.settings import ServerSettings
from tests.unit.server.test_app_fake import FakeEngine, FakeInfo

WEB = Path(__file__).parents[4] / "src" / "mlxd" / "server" / "web"


def call(
    settings: ServerSettings, method: str, path: str, base: str = "http://127.0.0.1:8080", **kw: Any
) -> httpx.Response:
    app = create_app(FakeEngine(), settings, default_model=FakeInfo())  # type: ignore[arg-type]

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base) as c:
            return await c.request(method, path, **kw)

    return asyncio.run(go())


@pytest.mark.parametrize("path", ["/", "/web/app.js", "/web/app.css"])
def test_page_files_have_strict_headers(path: str) -> None:
    r = call(ServerSettings(api_key="k"), "GET", path)  # no key needed for the page itself
    assert r.status_code == 200
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"


def test_page_has_no_inline_script_or_style() -> None:
    html = call(ServerSettings(), "GET", "/").text
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/web/app.js" defer>']
    assert "<style" not in html and " style=" not in html
    assert not re.search(r"<[^>]*\son\w+=", html)  # no inline event handlers
    assert "http" not in html  # nothing from another origin


def test_model_text_is_never_parsed_as_html() -> None:
    js = (WEB / "app.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "eval(" not in js


def test_no_web_keeps_the_json_root_and_no_assets() -> None:
    settings = ServerSettings(web=False)
    assert call(settings, "GET", "/").json()["api"] == "/v1"
    assert call(settings, "GET", "/web/app.js").status_code == 404
    assert call(ServerSettings(), "HEAD", "/").content == b""


@pytest.mark.parametrize(
    "base", ["http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080"]
)
def test_the_page_own_origin_may_post(base: str) -> None:
    r = call(
        ServerSettings(), "POST", "/v1/chat/completions", base, json={}, headers={"Origin": base}
    )
    assert r.status_code != 403, r.text


def test_the_page_own_origin_passes_beside_allowed_origins() -> None:
    settings = ServerSettings(allowed_origins=("https://ui.example",))
    own = {"Origin": "http://127.0.0.1:8080"}
    assert call(settings, "POST", "/v1/chat/completions", json={}, headers=own).status_code != 403
    other = {"Origin": "https://other.example"}
    assert call(settings, "POST", "/v1/models", json={}, headers=other).status_code == 403


@pytest.mark.parametrize(
    "origin", ["http://127.0.0.1:9090", "https://127.0.0.1:8080", "http://localhost:8080", "null"]
)
def test_other_origins_still_refused(origin: str) -> None:
    r = call(ServerSettings(), "POST", "/v1/chat/completions", json={}, headers={"Origin": origin})
    assert r.status_code == 403


def test_dns_names_are_not_trusted_as_same_origin() -> None:
    # A rebound name is "same origin" to the browser: only IP and localhost hosts count.
    assert not same_origin("http://evil.example:8080", "http", "evil.example:8080")
    assert not same_origin("http://box.lan", "http", "box.lan")
    assert same_origin("http://192.168.1.5:8080", "http", "192.168.1.5:8080")
    assert same_origin("HTTP://LOCALHOST:1/", "http", "localhost:1")
    server = ServerSettings(host="0.0.0.0")
    r = call(
        server,
        "POST",
        "/v1/models",
        "http://evil.example:8080",
        headers={"Origin": "http://evil.example:8080"},
    )
    assert r.status_code == 403
