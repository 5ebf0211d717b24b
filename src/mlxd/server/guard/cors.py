"""CORS for the origins the operator allows: preflights answered before auth, and every
response to an allowed origin marked readable by it.

A browser app using an official SDK sends its own headers (the Anthropic SDK `x-api-key`,
`anthropic-version`, `anthropic-dangerous-direct-browser-access`; both SDKs a family of
`x-stainless-*` ones that grows with each release), so a preflight must allow those, or the
browser never sends the request. A preflight from any other origin is refused (400), and the
request itself then meets the Guard's 403.
"""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlxd.server.origin import ANY_ORIGIN, normalize, origin_allowed

__all__ = ["SDK_HEADERS", "Cors", "header_allowed"]

# Request headers a page may send (names lower-case): what the openai and anthropic SDKs send
# (read off their requests), auth, and the CORS-safelisted ones.
SDK_HEADERS = frozenset(
    {
        "accept",
        "accept-language",
        "anthropic-beta",
        "anthropic-dangerous-direct-browser-access",
        "anthropic-version",
        "authorization",
        "content-language",
        "content-type",
        "idempotency-key",
        "openai-beta",
        "openai-organization",
        "openai-project",
        "x-api-key",
        "x-request-id",
    }
)
SDK_HEADER_PREFIXES = ("x-stainless-",)  # lang, os, arch, runtime, retry-count, timeout...
METHODS = ("GET", "POST", "OPTIONS")
EXPOSED = "retry-after"  # an SDK's backoff reads it on 429 and 503
MAX_AGE_SECONDS = "600"


def header_allowed(name: str) -> bool:
    name = name.strip().lower()
    return name in SDK_HEADERS or name.startswith(SDK_HEADER_PREFIXES)


class Cors:
    """ASGI middleware: CORS answers for `origins` (normalized, or `*` for any)."""

    def __init__(self, app: ASGIApp, origins: tuple[str, ...]) -> None:
        self.app = app
        self.origins = frozenset(normalize(o) for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope) if scope["type"] == "http" else None
        origin = headers.get("origin") if headers is not None else None
        if headers is None or origin is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(origin, headers)(scope, receive, send)
            return
        if not origin_allowed(origin, self.origins):
            await self.app(scope, receive, send)
            return

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out["Access-Control-Allow-Origin"] = self._allow_origin(origin)
                out["Access-Control-Expose-Headers"] = EXPOSED
                out.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, marked)

    def _preflight(self, origin: str, headers: Headers) -> PlainTextResponse:
        requested = headers.get("access-control-request-headers", "").split(",")
        names = [h.strip().lower() for h in requested if h.strip()]
        failures = []
        if not origin_allowed(origin, self.origins):
            failures.append("origin")
        if headers["access-control-request-method"] not in METHODS:
            failures.append("method")
        refused = [n for n in names if not header_allowed(n)]
        if refused:
            failures.append("headers (" + ", ".join(refused) + ")")
        if "access-control-request-private-network" in headers:
            failures.append("private-network")
        out = {
            "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            "Access-Control-Allow-Methods": ", ".join(METHODS),
            "Access-Control-Max-Age": MAX_AGE_SECONDS,
        }
        if failures:
            return PlainTextResponse("Disallowed CORS " + ", ".join(failures), 400, out)
        out["Access-Control-Allow-Origin"] = self._allow_origin(origin)
        if names:
            out["Access-Control-Allow-Headers"] = ", ".join(names)
        return PlainTextResponse("OK", 200, out)

    def _allow_origin(self, origin: str) -> str:
        return ANY_ORIGIN if ANY_ORIGIN in self.origins else origin
