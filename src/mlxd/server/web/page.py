"""The chat page: index.html at /, its script and style under /web/, with strict headers.

The page is plain static text read from the package once; it calls /v1 from the browser like
any client (same origin, so the guard's Origin check lets it in, see origin.same_origin).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, Request
from starlette.exceptions import HTTPException
from starlette.responses import Response

from mlxd.server.state import server_state

# Only this server's own files: no inline script or style, no other origin, never framed.
CSP = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
# URL path -> (packaged file, media type)
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/web/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/web/app.css": ("app.css", "text/css; charset=utf-8"),
}
PAGE_ASSETS = frozenset(path for path in FILES if path != "/")

router = APIRouter()


@cache
def _text(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


def page_file(path: str) -> Response:
    """One of FILES with the page's security headers."""
    name, media_type = FILES[path]
    return Response(_text(name), media_type=media_type, headers=HEADERS)


@router.get("/web/app.js")
@router.get("/web/app.css")
async def asset(request: Request) -> Response:
    """The page's script and style (404 under --no-web, like any unknown path)."""
    if not server_state(request).settings.web:
        raise HTTPException(status_code=404)
    return page_file(request.url.path)
