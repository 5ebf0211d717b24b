"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` on every path."""

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


def error_body(err: E.MlxdError) -> dict[str, Any]:
    return {"error": err.to_dict()}


def error_response(err: E.MlxdError) -> JSONResponse:
    headers = {}
    if err.http_status in (429, 503):
        headers["Retry-After"] = RETRY_AFTER_SECONDS
    if err.http_status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error_body(err), status_code=err.http_status, headers=headers)


def _field_name(loc: tuple[int | str, ...]) -> str:
    """pydantic loc -> dotted field name, without the "body" root and union-branch tags."""
    parts = [str(p) for p in loc if p != "body"]
    keep = [p for p in parts if not _is_type_tag(p)]
    return ".".join(keep) or "body"


def _is_type_tag(part: str) -> bool:
    # Union members and validators show up in loc, e.g. "float", "list[str]", "function-after[..]".
    return part in {"str", "int", "float", "bool", "list", "dict"} or "[" in part


def validation_error(exc: RequestValidationError | ValidationError) -> E.InvalidRequest:
    """The first pydantic error as a 400 naming its field (FastAPI would send a 422)."""
    errs = exc.errors()
    if not errs:
        return E.InvalidRequest("invalid request body")
    first = errs[0]
    if first.get("type") == "json_invalid":
        return E.InvalidRequest("request body is not valid JSON")
    field = _field_name(tuple(first.get("loc", ())))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "missing":
        return E.InvalidRequest(f"missing required field '{field}'", param=field)
    return E.InvalidRequest(f"invalid value for '{field}': {msg}", param=field)


def install_handlers(app: FastAPI) -> None:
    """Every error FastAPI or our code raises leaves as OpenAI's error shape."""

    async def on_mlxd(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, E.MlxdError)
        return error_response(exc)

    async def on_validation(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(validation_error(exc))

    async def on_http(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(HttpError(str(exc.detail), exc.status_code))

    async def on_other(_: Request, exc: Exception) -> Response:
        return error_response(E.EngineFault(f"internal error: {type(exc).__name__}"))

    app.add_exception_handler(E.MlxdError, on_mlxd)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_other)
