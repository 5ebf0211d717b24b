"""Bad input gets the right status and OpenAI's error shape, and the server keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest

OK_MSGS = [{"role": "user", "content": "hi"}]


def chat(**fields: object) -> dict[str, object]:
    return {"messages": OK_MSGS, "max_tokens": 2, **fields}


# (case id, raw body, expected status, expected error code, expected param or None)
CASES = [
    ("malformed-json", b'{"messages": [', 400, "invalid_request", None),
    ("not-an-object", b"[1, 2]", 400, "invalid_request", None),
    ("empty-body", b"", 400, "invalid_request", None),
    ("empty-messages", {"messages": []}, 400, "invalid_request", "messages"),
    ("missing-messages", {"model": "default"}, 400, "invalid_request", "messages"),
    (
        "unknown-role",
        {"messages": [{"role": "wizard", "content": "x"}]},
        400,
        "invalid_request",
        "messages.0.role",
    ),
    ("content-missing", {"messages": [{"role": "user"}]}, 400, "invalid_request", "messages.0"),
    (
        "image-content",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "http://x"}}],
                }
            ]
        },
        400,
        "invalid_request",
        None,
    ),
    ("temperature-string", chat(temperature="0.5"), 400, "invalid_request", "temperature"),
    ("temperature-bool", chat(temperature=True), 400, "invalid_request", "temperature"),
    (
        "temperature-nan",
        b'{"messages":[{"role":"user","content":"x"}],"temperature":NaN}',
        400,
        "invalid_request",
        "temperature",
    ),
    (
        "top-p-infinity",
        b'{"messages":[{"role":"user","content":"x"}],"top_p":Infinity}',
        400,
        "invalid_request",
        "top_p",
    ),
    ("temperature-too-high", chat(temperature=7), 400, "invalid_request", "temperature"),
    ("max-tokens-float", chat(max_tokens=2.5), 400, "invalid_request", "max_tokens"),
    ("max-tokens-bool", chat(max_tokens=True), 400, "invalid_request", "max_tokens"),
    ("max-tokens-huge", chat(max_tokens=10**30), 400, "invalid_request", "max_tokens"),
    ("max-tokens-zero", chat(max_tokens=0), 400, "invalid_request", "max_tokens"),
    (
        "top-logprobs-huge",
        chat(logprobs=True, top_logprobs=1000),
        400,
        "invalid_request",
        "top_logprobs",
    ),
    ("seed-negative", chat(seed=-1), 400, "invalid_request", "seed"),
    ("n-two", chat(n=2), 400, "invalid_request", "n"),
    (
        "response-format-unknown-type",
        chat(response_format={"type": "xml"}),
        400,
        "invalid_request",
        "response_format.type",
    ),
    ("too-many-stops", chat(stop=[f"s{i}" for i in range(40)]), 400, "invalid_request", "stop"),
    ("empty-stop", chat(stop=[""]), 400, "invalid_request", None),
    ("logit-bias-word", chat(logit_bias={"hello": 1}), 400, "invalid_request", "logit_bias"),
    (
        "template-kwarg-not-allowed",
        chat(chat_template_kwargs={"tools": "x"}),
        400,
        "invalid_request",
        "chat_template_kwargs.tools",
    ),
    ("unknown-model", chat(model="no-such-model"), 404, "model_not_found", "model"),
    ("absolute-path-model", chat(model="/etc"), 400, "invalid_request", "model"),
    ("dotdot-model", chat(model="../models/x"), 400, "invalid_request", "model"),
    ("home-model", chat(model="~/x"), 400, "invalid_request", "model"),
    ("backslash-model", chat(model="a\\b"), 400, "invalid_request", "model"),
    (
        "prompt-over-the-window",
        {"messages": [{"role": "user", "content": "hello " * 3000}]},
        400,
        "context_length_exceeded",
        None,
    ),
    ("tool-choice-without-tools", chat(tool_choice="required"), 400, "invalid_request", None),
    ("draft-tokens-zero", chat(num_draft_tokens=0), 400, "invalid_request", "num_draft_tokens"),
    ("draft-tokens-17", chat(num_draft_tokens=17), 400, "invalid_request", "num_draft_tokens"),
    ("draft-tokens-text", chat(num_draft_tokens="x"), 400, "invalid_request", "num_draft_tokens"),
    ("draft-tokens-minus", chat(num_draft_tokens=-1), 400, "invalid_request", "num_draft_tokens"),
    ("draft-kind-unknown", chat(draft_kind="eagle"), 400, "invalid_request", "draft_kind"),
]


def _post(http: httpx.Client, body: object, path: str = "/chat/completions") -> httpx.Response:
    if isinstance(body, bytes):
        return http.post(path, content=body)
    return http.post(path, json=body)


def assert_error_shape(r: httpx.Response, status: int, code: str | None) -> dict[str, object]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if code is not None:
        assert err["code"] == code
    return err


@pytest.mark.parametrize(
    ("body", "status", "code", "param"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_table(http, body: object, status: int, code: str, param: str | None) -> None:
    err = assert_error_shape(_post(http, body), status, code)
    if param is not None:
        assert err["param"] == param
    # and the server still answers a short completion right after
    ok = _post(http, chat())
    assert ok.status_code == 200, ok.text


def test_completions_bad_input(http) -> None:
    assert_error_shape(_post(http, {"prompt": 5}, "/completions"), 400, None)
    assert_error_shape(_post(http, {"prompt": "x", "echo": True}, "/completions"), 400, None)
    assert _post(http, {"prompt": "x", "max_tokens": 2}, "/completions").is_success


def test_oversized_body_is_413(http) -> None:
    big = b'{"messages":[{"role":"user","content":"' + b"a" * (5 << 20) + b'"}]}'
    assert_error_shape(_post(http, big), 413, "payload_too_large")


def test_oversized_chunked_body_is_413(server) -> None:
    """No Content-Length: the body is counted as it arrives."""

    def chunks():  # type: ignore[no-untyped-def]
        yield b'{"messages":[{"role":"user","content":"'
        for _ in range(80):
            yield b"a" * (64 << 10)
        yield b'"}]}'

    r = httpx.post(server.base_url + "/chat/completions", content=chunks(), timeout=60)
    assert_error_shape(r, 413, "payload_too_large")


def test_dns_rebinding_host_is_refused(server) -> None:
    r = httpx.get(server.base_url + "/models", headers={"Host": "evil.example:8080"}, timeout=10)
    assert_error_shape(r, 403, "host_not_allowed")
    for host in ("localhost:1234", "127.0.0.1", "[::1]:80"):
        assert httpx.get(server.base_url + "/models", headers={"Host": host}).status_code == 200


def test_unknown_route_and_method(server) -> None:
    assert_error_shape(httpx.get(server.url + "/v1/nothing"), 404, "not_found")
    assert_error_shape(httpx.get(server.base_url + "/chat/completions"), 405, None)


def test_errors_are_typed_in_the_client(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="default", messages=[])
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=OK_MSGS)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="default", messages=OK_MSGS, n=3)


def test_cors_is_off_by_default(server) -> None:
    r = httpx.options(
        server.base_url + "/chat/completions",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in r.headers
