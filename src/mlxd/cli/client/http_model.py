"""A running `mlxd serve` as the CLI's model client (`mlxd run/chat --server URL`).

Each question is one streamed POST /v1/chat/completions on its own connection; the SSE
chunks come back as the chat layer's events (chat_chunks.ChunkDecoder), so the renderer,
`--json` and the REPL work as they do in-process. cancel() closes the connection, and the
server cancels the request at its next step. Errors keep their class (errors.from_http):
the same one-line message and exit code as in-process.

The standard library's http.client, not httpx: importing httpx costs ~0.1 s of a start-up
that is otherwise ~0.15 s on this path (no mlx, no engine, no store).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, urlsplit

from mlxd import __version__
from mlxd.chat.chat_request import ChatRequest
from mlxd.chat.tool_choice import ToolChoice
from mlxd.cli.client.chat_chunks import ChunkDecoder
from mlxd.config import SETTINGS
from mlxd.errors import EngineFault, EngineUnavailable, InvalidRequest, MlxdError, ModelNotFound
from mlxd.errors import from_http as error_from_http
from mlxd.types import ChatEvent, FinishEvent, FinishReason, Timings

CONNECT_TIMEOUT_S = 10.0  # after connecting no read timeout: a long prefill is not a failure
ERROR_BODY_BYTES = 1 << 16  # most of an error response read for its message


@dataclass(frozen=True, slots=True)
class ServerAddress:
    """Where the server is: `http://HOST:PORT` plus a base path (a reverse proxy's)."""

    scheme: str
    host: str
    port: int
    base_path: str = ""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"

    def connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
        return http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_TIMEOUT_S)


def server_address(url: str) -> ServerAddress:
    """Parse --server / MLXD_SERVER: `http(s)://HOST[:PORT][/PATH][/v1]`, or `HOST[:PORT]`
    (http; the port defaults to `mlxd serve`'s, as OLLAMA_HOST does with ollama's)."""
    text = url.strip()
    has_scheme = "://" in text
    parts = urlsplit(text if has_scheme else "http://" + text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(
            f"--server {url!r}: expected http://HOST:PORT (or https://, or HOST:PORT)",
            param="server",
        )
    try:
        port = parts.port
    except ValueError as e:
        raise InvalidRequest(f"--server {url!r}: the port is not a number", param="server") from e
    if port is None:
        port = (
            {"http": 80, "https": 443}[parts.scheme]
            if has_scheme
            else SETTINGS["port"].default_value()
        )
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1") if path.endswith("/v1") else path
    return ServerAddress(parts.scheme, parts.hostname, port, path)


def request_body(model: str, request: ChatRequest) -> dict[str, Any]:
    """The /v1/chat/completions body: each option under its OPTIONS name, which is the
    server's field name; streamed, with usage at the end."""
    body: dict[str, Any] = {"model": model, "messages": request.messages}
    body.update(request.options.wire())
    if request.tools:
        body["tools"] = request.tools
    if request.tool_choice != ToolChoice():
        body["tool_choice"] = request.tool_choice.wire()
    if request.template_kwargs:
        body["chat_template_kwargs"] = request.template_kwargs
    return body | {"stream": True, "stream_options": {"include_usage": True}}


@dataclass(slots=True)
class HttpModel:
    """The model `name` on the server at `server`; ask() streams one answer from it."""

    server: ServerAddress
    model: str  # sent as given ("default": the server's preloaded model)
    api_key: str = ""
    name: str = ""  # what the server calls it (its /v1/models id)
    takes_images: bool | None = None  # unknown: the server refuses images it cannot read

    @property
    def server_url(self) -> str:
        return self.server.url

    @classmethod
    def connect(cls, server: ServerAddress, api_key: str, model: str | None) -> HttpModel:
        """Check that the server answers, takes the key and knows the model."""
        client = cls(server, model or "default", api_key)
        try:
            card = client.model_card(client.model)
        except ModelNotFound:
            if model is not None:
                raise
            listed = _listed(client.listing())
            raise ModelNotFound(
                f"the server at {server.url} has no default model: name one{listed}",
                param="model",
            ) from None
        client.name = str(card.get("id") or client.model)
        return client

    def model_card(self, name: str) -> dict[str, Any]:
        """GET /v1/models/NAME: the model's card; ModelNotFound when the server lacks it. A
        server without that route (a plain 404: vllm-mlx) or that answers it with its whole
        list (mlx_lm.server) is looked up in its GET /v1/models instead."""
        path = "/v1/models/" + quote(name, safe="/@:")
        try:
            body = self._get_json(path)
        except _PlainNotFound as e:
            return self._listed_card(name, e.message)
        if isinstance(body, dict) and body.get("object") != "list":
            return body
        return self._listed_card(name, None, _cards(body))  # the list it answered with

    def listing(self) -> list[dict[str, Any]] | None:
        """The model cards GET /v1/models lists, or None when the server gives no such list."""
        try:
            return _cards(self._get_json("/v1/models"))
        except MlxdError:
            return None

    def resident(self) -> dict[str, Any]:
        """GET /health/models: what the server holds now (`mlxd ps`)."""
        body = self._get_json("/health/models")
        if not isinstance(body, dict) or not isinstance(body.get("models"), list):
            raise EngineUnavailable(f"{self.server.url}/health/models gave no model list")
        return body

    def _listed_card(
        self, name: str, why: str | None, cards: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """`name`'s card in `cards` (GET /v1/models when None)."""
        if cards is None:
            cards = self.listing()
        if cards is None:
            answered = why or f"{self.server.url}/v1/models/{name} gave no model card"
            raise EngineUnavailable(
                f"{answered}, and GET /v1/models gave no model list: "
                f"is {self.server.url} the server's URL?"
            )
        for card in cards:
            if card["id"] == name:
                return card
        raise ModelNotFound(_not_served(self.server.url, name, cards), param="model")

    def _get_json(self, path: str) -> object:
        conn, resp = self._send("GET", path, None)
        try:
            return json.loads(resp.read(ERROR_BODY_BYTES) or b"{}")
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise self._broken(e) from None
        finally:
            conn.close()

    def ask(self, request: ChatRequest) -> HttpStream:
        """POST one streamed chat request; raises the server's refusal (bad request, unknown
        model, auth) here, as start_chat raises in-process."""
        started = time.perf_counter()
        body = request_body(self.model, request)
        conn, resp = self._send("POST", "/v1/chat/completions", body)
        if "text/event-stream" not in (resp.getheader("content-type") or ""):
            conn.close()
            raise EngineFault(f"the server at {self.server.url} did not stream its answer")
        return HttpStream(self.server, conn, resp, started)

    def embed(self, texts: list[str], dimensions: int | None) -> tuple[list[list[float]], int]:
        """POST /v1/embeddings (floats): one vector per text, and the tokens embedded."""
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if dimensions is not None:
            body["dimensions"] = dimensions
        conn, resp = self._send("POST", "/v1/embeddings", body)
        try:
            answer = json.loads(resp.read())
            vectors = [item["embedding"] for item in answer["data"]]
            return vectors, int(answer["usage"]["prompt_tokens"])
        except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as e:
            raise self._broken(e) from None
        finally:
            conn.close()

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """One request on a fresh connection; a non-200 answer is raised as its error."""
        conn = self.server.connection()
        try:
            conn.connect()
            assert conn.sock is not None
            conn.sock.settimeout(None)
            payload = None if body is None else json.dumps(body).encode()
            conn.request(method, self.server.base_path + path, payload, self._headers(payload))
            resp = conn.getresponse()
        except BaseException as e:
            conn.close()
            if isinstance(e, OSError | http.client.HTTPException):
                raise self._unreachable(e) from None
            raise
        if resp.status != 200:
            error = self._refusal(resp, path)
            conn.close()
            raise error
        return conn, resp

    def _headers(self, payload: bytes | None) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "User-Agent": f"mlxd/{__version__}"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _refusal(self, resp: http.client.HTTPResponse, path: str) -> MlxdError:
        """The error a non-200 answer stands for, from OpenAI's {"error": {...}} body (or
        mlx_lm.server's {"error": "..."}, FastAPI's {"detail": "..."})."""
        error = _error_body(resp)
        message, code = str(error.get("message") or resp.reason), error.get("code")
        if resp.status == 404 and code != ModelNotFound.code:  # not in mlxd's (OpenAI's) words
            return self._not_found(path, message)
        if resp.status in (401, 403):  # in the message itself: the CLI prints str(err)
            message += " (the key: --api-key KEY or MLXD_API_KEY)"
        err = error_from_http(resp.status, code if isinstance(code, str) else None, message)
        err.param = error.get("param") if isinstance(error.get("param"), str) else None
        return err

    def _not_found(self, path: str, message: str) -> MlxdError:
        """A 404 that does not say model_not_found: for the chat request, the model is not
        served when the server's /v1/models lacks it; otherwise the server's words."""
        answered = f"{self.server.url}{path} answered 404 ({message})"
        if path.startswith("/v1/models"):
            return _PlainNotFound(answered)
        cards = self.listing()
        if cards is not None and all(card["id"] != self.model for card in cards):
            served = _not_served(self.server.url, self.model, cards)
            return ModelNotFound(f"{served} (it answered 404: {message})", param="model")
        return EngineUnavailable(answered)

    def _unreachable(self, e: BaseException) -> EngineUnavailable:
        reason = _reason(e)
        return EngineUnavailable(
            f"cannot reach the mlxd server at {self.server.url} ({reason}); "
            "is `mlxd serve` running there?"
        )

    def _broken(self, e: BaseException) -> EngineUnavailable:
        return EngineUnavailable(f"the server at {self.server.url} broke off ({_reason(e)})")


class _PlainNotFound(EngineUnavailable):
    """A 404 from GET /v1/models... not in mlxd's words: model_card then asks the list."""


def _cards(body: object) -> list[dict[str, Any]] | None:
    """The model cards of a GET /v1/models body, or None when it is no such list."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [c for c in data if isinstance(c, dict) and isinstance(c.get("id"), str)]


def _error_body(resp: http.client.HTTPResponse) -> dict[str, Any]:
    try:
        body = json.loads(resp.read(ERROR_BODY_BYTES))
    except (OSError, http.client.HTTPException, ValueError):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return error
    text = error if isinstance(error, str) else None
    if text is None and isinstance(body, dict) and isinstance(body.get("detail"), str):
        text = body["detail"]
    return {"message": text or f"HTTP {resp.status} {resp.reason}".strip()}


def _not_served(url: str, name: str, cards: list[dict[str, Any]]) -> str:
    return f"the server at {url} does not serve a model named {name!r}{_listed(cards)}"


def _listed(cards: list[dict[str, Any]] | None, most: int = 8) -> str:
    """ "; it lists: a, b" (its /v1/models), or "" when the server gave no list."""
    if cards is None:
        return ""
    if not cards:
        return "; its /v1/models lists no models"
    names = ", ".join(str(card["id"]) for card in cards[:most])
    more = f" and {len(cards) - most} more" if len(cards) > most else ""
    return f"; it lists: {names}{more}"


def _reason(e: BaseException) -> str:
    if isinstance(e, socket.gaierror):
        return "unknown host"
    if isinstance(e, TimeoutError | socket.timeout):
        return f"no answer within {CONNECT_TIMEOUT_S:g} s"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    text = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return str(text).lower() if isinstance(e, OSError) else str(text)


@dataclass(slots=True)
class HttpStream:
    """One answer streaming from the server: iterate for chat events (the last one a
    FinishEvent, with timings measured here); cancel() closes the connection."""

    server: ServerAddress
    conn: http.client.HTTPConnection
    resp: http.client.HTTPResponse
    started: float
    decoder: ChunkDecoder = field(default_factory=ChunkDecoder)
    first_at: float | None = None
    cancelled: bool = False
    done: bool = False

    @property
    def model(self) -> str | None:
        return self.decoder.model

    def cancel(self) -> None:
        """Idempotent: the stream then ends with FinishEvent(CANCELLED) (or already ended)."""
        self.cancelled = True
        self._close()

    def __iter__(self) -> Iterator[ChatEvent]:
        if self.done:
            return
        try:
            if not self.cancelled:
                yield from self._events()
        except (OSError, http.client.HTTPException, ValueError) as e:
            if not self.cancelled:
                yield self._stamp(self._dropped(e))
        finally:
            self._close()
        if not self.done:  # cancelled, or iterated again after an interruption
            yield self._stamp(FinishEvent(FinishReason.CANCELLED, self.decoder.usage))

    def _events(self) -> Iterator[ChatEvent]:
        decoder = self.decoder
        while not decoder.finished:
            raw = self.resp.readline()
            if not raw:
                break
            line = raw.decode("utf-8", "replace").removesuffix("\n")
            for event in decoder.feed(line):
                yield self._stamp(event)
        for event in decoder.close():
            yield self._stamp(event)

    def _stamp(self, event: ChatEvent) -> ChatEvent:
        """Client-side timings: first output and finish, from the request's start."""
        now = time.perf_counter()
        if not isinstance(event, FinishEvent):
            if self.first_at is None:
                self.first_at = now
            return event
        self.done = True
        first = self.first_at if self.first_at is not None else now
        timings = Timings(ttft_s=first - self.started, total_s=now - self.started)
        return replace(event, timings=timings)

    def _dropped(self, e: BaseException) -> FinishEvent:
        message = f"the connection to the server at {self.server.url} dropped ({_reason(e)})"
        return FinishEvent(
            FinishReason.ERROR,
            self.decoder.usage,
            error=message,
            error_code=EngineUnavailable.code,
        )

    def _close(self) -> None:
        """Shut the socket down at once (the response's file may still hold a reference)."""
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.resp.close()
        self.conn.close()
