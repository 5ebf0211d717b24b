"""Errors in each API's own shape: OpenAI's `{"error": {"message", "type", "param", "code"}}`
on every path but Anthropic's `/v1/messages`, which gets `{"type": "error", "error": {"type",
"message"}}` with the same status, and Ollama's `/api/` paths, which get `{"error": "..."}`."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from mlxd import errors as E


class PayloadTooLarge(E.InvalidRequest):
    """Request body over max_body_bytes (HTTP-only, so it lives with the server)."""

    http_status = 413
    code = "payload_too_large"


class HostNotAllowed(E.MlxdError):
    """Host header is not a loopback name on a loopback bind (DNS rebinding guard)."""

    http_status = 403
    error_type = "invalid_request_error"
    code = "host_not_allowed"


class HttpError(E.MlxdError):
    """Starlette's own HTTP errors (unknown route, wrong method) in OpenAI's shape."""

    error_type = "invalid_request_error"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.http_status = status
        self.code = "not_found" if status == 404 else None


RETRY_AFTER_SECONDS = "1"
ANTHROPIC_PATH = "/v1/messages"  # and everything under it (count_tokens)
OLLAMA_PREFIX = "/api/"

# HTTP status -> Anthropic's error type; any other 4xx is an invalid_request_error, 5xx api_error.
ANTHROPIC_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def is_anthropic_path(path: str) -> bool:
    return path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")


def anthropic_error_body(err: E.MlxdError) -> dict[str, Any]:
    default = "api_error" if err.http_status >= 500 else "invalid_request_error"
    kind = ANTHROPIC_ERROR_TYPES.get(err.http_status, default)
    message = err.message
    if isinstance(err, E.ContextOverflow) and err.prompt_tokens is not None and err.window:
        # Anthropic's own words, which Claude Code parses to compact the conversation; the
        # maximum is the longest prompt that leaves room for one token.
        message = f"prompt is too long: {err.prompt_tokens} tokens > {err.window - 1} maximum"
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_body(err: E.MlxdError, path: str = "") -> dict[str, Any]:
    """The error in the shape of the API that `path` belongs to."""
    if is_anthropic_path(path):
        return anthropic_error_body(err)
    if path.startswith(OLLAMA_PREFIX):
        return {"error": err.message}
    body = err.to_dict()
    if isinstance(err, E.ContextOverflow) and err.prompt_tokens is not None and err.window:
        # OpenAI's words (code context_length_exceeded), which clients such as litellm match.
        counted = f"at least {err.prompt_tokens}" if err.at_least else str(err.prompt_tokens)
        body["message"] = (
            f"This model's maximum context length is {err.window} tokens. However, your "
            f"messages resulted in {counted} tokens. Please reduce the length of the messages."
        )
    return {"error": body}


def error_headers(err: E.MlxdError) -> dict[str, str]:
    """The headers an error response carries besides its body's (retry hint, auth scheme)."""
    headers = {}
    if err.http_status in (429, 503):
        headers["retry-after"] = RETRY_AFTER_SECONDS
    if err.http_status == 401:
        headers["www-authenticate"] = "Bearer"
    return headers


def error_response(err: E.MlxdError, path: str = "") -> JSONResponse:
    body = error_body(err, path)
    return JSONResponse(body, status_code=err.http_status, headers=error_headers(err))


def _field_name(loc: tuple[int | str, ...]) -> str:
    """pydantic loc -> dotted field name, without the "body" root and union-branch tags."""
    parts = [str(p) for p in loc if p != "body"]
    keep = [p for p in parts if not _is_type_tag(p)]
    return ".".join(keep) or "body"


def _is_type_tag(part: str) -> bool:
    # Union members and validators show up in loc, e.g. "float", "list[str]", "function-after[..]".
    return part in {"str", "int", "float", "bool", "list", "dict"} or "[" in part


def validation_error(exc: RequestValidationError | ValidationError) -> E.InvalidRequest:
    """The most specific pydantic error (the deepest field: inside a union, the branch that
    got furthest, and at equal depth the branch of the right type) as a 400 naming its field
    (FastAPI would send a 422)."""
    errs = exc.errors()
    if not errs:
        return E.InvalidRequest("invalid request body")
    first = max(errs, key=_specificity)
    if first.get("type") == "json_invalid":
        return E.InvalidRequest("request body is not valid JSON")
    field = _field_name(tuple(first.get("loc", ())))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "missing":
        return E.InvalidRequest(f"missing required field '{field}'", param=field)
    return E.InvalidRequest(f"invalid value for '{field}': {msg}", param=field)


def _specificity(err: Any) -> tuple[int, bool]:
    # A list of 10001 items fails `str | list[...]` twice: "not a string" says less than
    # "at most 10000 items" (pydantic's type mismatches are its `*_type` errors).
    return len(tuple(err.get("loc", ()))), not str(err.get("type", "")).endswith("_type")


def install_handlers(app: FastAPI) -> None:
    """Every error FastAPI or our code raises leaves in the shape of its route's API."""

    async def on_mlxd(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, E.MlxdError)
        return error_response(exc, request.url.path)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(validation_error(exc), request.url.path)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(HttpError(str(exc.detail), exc.status_code), request.url.path)

    async def on_other(request: Request, exc: Exception) -> Response:
        err = E.EngineFault(f"internal error: {type(exc).__name__}")
        return error_response(err, request.url.path)

    app.add_exception_handler(E.MlxdError, on_mlxd)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_other)
