"""Cross-site requests: a browser sends `Origin` on every cross-site POST (also the "simple"
ones that skip the CORS preflight: text/plain, form and multipart bodies). Any Origin not
explicitly allowed is refused with 403; requests without Origin (curl, SDKs) keep working."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env

BODY = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
# What a hostile page can send without a preflight (fetch with mode "no-cors", or a <form>).
SIMPLE_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"]


def post(url: str, content_type: str, origin: str | None = None) -> httpx.Response:
    headers = {"Content-Type": content_type}
    if origin is not None:
        headers["Origin"] = origin
    return httpx.post(url + "/chat/completions", content=BODY, headers=headers, timeout=60)


@pytest.mark.parametrize("content_type", SIMPLE_TYPES)
def test_cross_site_simple_post_is_refused(server: ServerProcess, content_type: str) -> None:
    r = post(server.base_url, content_type, origin="http://evil.example")
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "origin_not_allowed"
    assert "--allowed-origins" in r.json()["error"]["message"]


@pytest.mark.parametrize("origin", ["null", "http://127.0.0.1:1", "https://evil.example"])
def test_every_unlisted_origin_is_refused_on_every_route(
    server: ServerProcess, origin: str
) -> None:
    assert post(server.base_url, "application/json", origin=origin).status_code == 403
    for path in ("/v1/models", "/metrics", "/health"):
        r = httpx.get(server.url + path, headers={"Origin": origin}, timeout=10)
        assert r.status_code == 403, (path, r.text)


@pytest.mark.parametrize("content_type", [*SIMPLE_TYPES, "application/json"])
def test_requests_without_origin_keep_working(server: ServerProcess, content_type: str) -> None:
    # `curl -d '{...}'` sends application/x-www-form-urlencoded and no Origin.
    assert post(server.base_url, content_type).status_code == 200


@pytest.fixture(scope="module")
def origin_server(tiny_chat_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    """Allows one origin by flag and one by MLXD_ALLOWED_ORIGINS."""
    env = server_env(server_home, MLXD_ALLOWED_ORIGINS="http://env.example")
    srv = launch(["--model", str(tiny_chat_model), "--allowed-origins", "http://ui.example"], env)
    yield srv
    srv.stop()


def test_allowed_origins_are_served(origin_server: ServerProcess) -> None:
    url = origin_server.base_url
    ok = post(url, "text/plain", origin="http://ui.example")
    assert ok.status_code == 200, ok.text
    assert ok.headers["access-control-allow-origin"] == "http://ui.example"
    assert post(url, "application/json", origin="http://evil.example").status_code == 403
    assert post(url, "application/json").status_code == 200
    # The flag replaces the environment's list (as every flag does).
    assert post(url, "text/plain", origin="http://env.example").status_code == 403


def test_env_origins_apply_when_the_flag_is_absent(
    tiny_chat_model: Path, server_home: Path
) -> None:
    env = server_env(server_home, MLXD_ALLOWED_ORIGINS="http://a.example, http://b.example")
    srv = launch(["--model", str(tiny_chat_model)], env)
    try:
        for origin in ("http://a.example", "http://b.example"):
            assert post(srv.base_url, "text/plain", origin=origin).status_code == 200
        assert post(srv.base_url, "text/plain", origin="http://c.example").status_code == 403
    finally:
        srv.stop()


# Headers a browser sets itself (a page cannot), or that need no preflight.
BROWSER_OWN = {"host", "connection", "content-length", "accept-encoding", "user-agent", "accept"}
# The browser builds of the SDKs add these to what the Python ones send.
BROWSER_SDK = {"anthropic-dangerous-direct-browser-access", "x-api-key"}


def sdk_headers() -> set[str]:
    """The header names the installed openai and anthropic SDKs really send, read off their
    requests (a mock transport answers 500, and no retry is made)."""
    import anthropic
    import httpx2
    import openai

    seen: set[str] = set()

    def record(names: object) -> None:
        seen.update(str(n).lower() for n in names)  # type: ignore[attr-defined]

    oai = openai.OpenAI(
        api_key="k", organization="o", project="p", base_url="http://sdk.invalid/v1",
        max_retries=0, http_client=httpx.Client(transport=httpx.MockTransport(
            lambda r: record(r.headers.keys()) or httpx.Response(500, json={}))),
    )  # fmt: skip
    claude = anthropic.Anthropic(
        api_key="k", base_url="http://sdk.invalid", max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(
            lambda r: record(r.headers.keys()) or httpx2.Response(500, json={}))),
    )  # fmt: skip
    user = [{"role": "user", "content": "hi"}]
    calls = [
        lambda: oai.chat.completions.create(model="m", messages=user, stream=True),  # type: ignore[arg-type]
        lambda: oai.responses.create(model="m", input="hi"),
        lambda: claude.beta.messages.create(
            model="m",
            max_tokens=1,
            messages=user,
            betas=["b"],  # type: ignore[arg-type]
        ),
        lambda: claude.messages.stream(model="m", max_tokens=1, messages=user).__enter__(),  # type: ignore[arg-type]
        lambda: claude.messages.count_tokens(model="m", messages=user),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the mock's 500, whatever class
            call()
    return seen


def preflight(url: str, origin: str, headers: list[str], method: str = "POST") -> httpx.Response:
    return httpx.options(
        url + "/v1/messages",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": ", ".join(headers),
        },
        timeout=30,
    )


def test_a_preflight_from_an_allowed_origin_allows_what_the_sdks_send(
    origin_server: ServerProcess,
) -> None:
    sent = sdk_headers()
    assert {"anthropic-version", "anthropic-beta", "openai-project"} <= sent
    assert len({h for h in sent if h.startswith("x-stainless-")}) >= 8
    wanted = sorted((sent - BROWSER_OWN) | BROWSER_SDK | {"x-stainless-future-field"})
    r = preflight(origin_server.url, "http://ui.example", wanted)
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == "http://ui.example"
    allowed = {h.strip() for h in r.headers["access-control-allow-headers"].split(",")}
    assert set(wanted) <= allowed
    assert "POST" in r.headers["access-control-allow-methods"]


def test_a_preflight_is_refused_for_other_origins_headers_and_methods(
    origin_server: ServerProcess,
) -> None:
    url = origin_server.url
    other = preflight(url, "http://evil.example", ["x-api-key"])
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    assert "origin" in other.text
    odd = preflight(url, "http://ui.example", ["x-api-key", "x-forwarded-for"])
    assert odd.status_code == 400 and "x-forwarded-for" in odd.text
    assert preflight(url, "http://ui.example", ["x-api-key"], method="DELETE").status_code == 400


def test_no_allowed_origins_means_no_cors(server: ServerProcess) -> None:
    # The Guard refuses the Origin, as it refuses the request itself.
    r = preflight(server.url, "http://ui.example", ["x-api-key"])
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
