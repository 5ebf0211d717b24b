"""One pure-ASGI guard in front of every route: Host and Origin checks, auth, draining, body
cap, metrics.

Pure ASGI (not BaseHTTPMiddleware) so streaming responses and disconnect detection pass
through untouched and the per-request cost stays a few attribute reads.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mlxd.errors import AuthError, EngineUnavailable, MlxdError
from mlxd.server.error_responses import HostNotAllowed, PayloadTooLarge, error_body, error_headers
from mlxd.server.guard.connections import RequestTimeout
from mlxd.server.lifecycle import Lifecycle
from mlxd.server.metrics import Metrics
from mlxd.server.origin import host_name, normalize, origin_allowed, refusal, same_origin
from mlxd.server.settings import LOOPBACK_NAMES, ServerSettings
from mlxd.server.sse import dumps
from mlxd.server.web.page import PAGE_ASSETS

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# No auth: load balancers, probes, reachability, and the chat page (its API calls need the key).
OPEN_PATHS = frozenset({"/", "/health", *PAGE_ASSETS})
ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/responses",
        "/v1/models",
        "/v1/embeddings",
        "/api/chat",
        "/api/generate",
        "/api/tags",
        "/api/show",
        "/api/ps",
        "/api/version",
        "/api/embed",
        "/api/embeddings",
        "/",
        "/health",
        "/health/models",
        "/metrics",
        *PAGE_ASSETS,
    }
)


def route_label(path: str) -> str:
    """Bounded label set for metrics: unknown paths are all "other"."""
    if path in ROUTES:
        return path
    if path.startswith("/v1/models/"):
        return "/v1/models/{id}"
    return "other"


def host_is_loopback(host_header: str) -> bool:
    """'localhost', '127.0.0.1', '[::1]', each with or without ':port'."""
    return host_name(host_header.strip().lower()) in LOOPBACK_NAMES


class Guard:
    def __init__(
        self, app: ASGIApp, settings: ServerSettings, metrics: Metrics, lifecycle: Lifecycle
    ) -> None:
        self.app = app
        self.settings = settings
        self.metrics = metrics
        self.lifecycle = lifecycle
        self.key = settings.api_key.encode()
        self.origins = frozenset(normalize(o) for o in settings.allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = route_label(scope["path"])
        send = self._counting(send, route)
        headers = _headers(scope)
        err = self._refusal(scope, headers)
        has_body = scope["method"] in BODY_METHODS
        if err is None and has_body:
            err, receive = await self._capped_body(headers, receive)
        if err is not None:
            # A refused body is never read: hang up, or the server would go on receiving it.
            await send_error(send, err, close=has_body, path=scope["path"])
            return
        await self.app(scope, receive, send)

    def _counting(self, send: Send, route: str) -> Send:
        metrics = self.metrics

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                metrics.count_request(route, int(message["status"]))
            await send(message)

        return counting_send

    def _refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> MlxdError | None:
        if self.settings.loopback:
            host = headers.get(b"host", b"").decode("latin-1")
            if not host_is_loopback(host):
                return HostNotAllowed(f"Host '{host}' is not allowed on a loopback server")
        origin = headers.get(b"origin")
        if origin is not None and not self._origin_ok(origin.decode("latin-1"), scope, headers):
            return refusal(origin.decode("latin-1"))
        path = scope["path"]
        if self.key and path not in OPEN_PATHS and not self._authorized(headers):
            return AuthError(
                "missing or invalid API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')"
            )
        if self.lifecycle.draining and path not in OPEN_PATHS and path != "/metrics":
            return EngineUnavailable("server is shutting down")
        return None

    def _origin_ok(self, origin: str, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        """An allowed origin, or the server's own (its chat page's fetches send Origin)."""
        if origin_allowed(origin, self.origins):
            return True
        host = headers.get(b"host", b"").decode("latin-1")
        return bool(host) and same_origin(origin, str(scope.get("scheme", "http")), host)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        """`Authorization: Bearer KEY` (OpenAI clients) or `x-api-key: KEY` (Anthropic's)."""
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        # compare_digest: constant time, so the key cannot be guessed byte by byte.
        if scheme.lower() == b"bearer" and secrets.compare_digest(token.strip(), self.key):
            return True
        api_key = headers.get(b"x-api-key")
        return api_key is not None and secrets.compare_digest(api_key.strip(), self.key)

    async def _capped_body(
        self, headers: dict[bytes, bytes], receive: Receive
    ) -> tuple[MlxdError | None, Receive]:
        """Read the whole body up to the cap (Content-Length checked first, then counted),
        within the body timeout."""
        cap = self.settings.max_body_bytes
        too_big = PayloadTooLarge(f"request body is larger than {cap} bytes")
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > cap):
            return too_big, receive
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.settings.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return EngineUnavailable("client disconnected"), receive
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > cap:
                        return too_big, receive
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            timeout = self.settings.body_timeout
            return RequestTimeout(f"request body not received within {timeout:g}s"), receive
        return None, _replay(b"".join(chunks), receive)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive() that hands the buffered body once, then passes through (disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope["headers"]}


async def send_error(send: Send, err: MlxdError, *, close: bool = False, path: str = "") -> None:
    """The error response in the shape of `path`'s API; `close`: then close the connection
    (uvicorn does on this header)."""
    body = dumps(error_body(err, path)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    headers += [(k.encode(), v.encode()) for k, v in error_headers(err).items()]
    await send({"type": "http.response.start", "status": err.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
