"""Ollama's API under /api/: chat and generate on the same chat layer as /v1 (NDJSON
streams), embed and embeddings on the engine's embedding path, the model list, show, ps and
version; model management refused with 501 and what to do instead (requests never
download: `mlxd pull`). `keep_alive` sets how long the engine keeps the model after the
request (engine.Engine.keep_alive); the operator's `--max-models` still bounds what stays
loaded, and the preloaded model stays."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from mlxd import __version__
from mlxd.chat.chat_request import MaxTokensPolicy
from mlxd.chat.embedding import EmbedInput
from mlxd.chat.options import ChatOptions
from mlxd.errors import InvalidRequest, MlxdError, ModelNotFound
from mlxd.server.generation import chat_endpoint, embed, respond
from mlxd.server.ollama.fill_in import fill_in_prompt
from mlxd.server.ollama.model_cards import ModelFacts, ps_entry, show_body, tag_entry
from mlxd.server.ollama.schemas import (
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaRequest,
    ShowRequest,
)
from mlxd.server.ollama.wire import NDJSON, OllamaWire, loaded
from mlxd.server.request_inputs import in_client_terms, parse
from mlxd.server.settings import ServerSettings
from mlxd.server.state import ServerState
from mlxd.server.state import server_state as _state

if TYPE_CHECKING:
    from mlxd.chat.session import ChatStream
    from mlxd.engine import ModelInfo
    from mlxd.store.catalog import CatalogEntry

# The Ollama release whose API fields these routes follow (what /api/version reports).
OLLAMA_API_VERSION = "0.12.0"

router = APIRouter()
R = TypeVar("R", bound=OllamaRequest)


class NotServed(MlxdError, http_status=501):
    """An Ollama endpoint mlxd does not serve (model management)."""

    code = "not_implemented"


@router.post("/api/chat")
async def chat(request: Request) -> Response:
    received = time.perf_counter_ns()
    st = _state(request)
    req = parse(OllamaChatRequest, await request.body(), st.settings)
    if not req.messages:
        return await _load(st, req, chat=True)
    return await chat_endpoint(
        request, partial(_parsed, req), partial(_wire, received, True), media_type=NDJSON
    )


@router.post("/api/generate")
async def generate(request: Request) -> Response:
    received = time.perf_counter_ns()
    st = _state(request)
    req = parse(OllamaGenerateRequest, await request.body(), st.settings)
    if not req.prompt and not req.images and req.suffix is None:
        return await _load(st, req, chat=False)
    if req.raw or req.suffix is not None:
        return await _raw_generate(request, st, req, received)
    return await chat_endpoint(
        request, partial(_parsed, req), partial(_wire, received, False), media_type=NDJSON
    )


def _parsed(req: R, body: bytes, settings: ServerSettings) -> R:
    return req  # the route parsed it already (to answer a request without a prompt)


def _wire(
    received: int,
    chat: bool,
    req: OllamaRequest,
    info: ModelInfo,
    stream: ChatStream,
    st: ServerState,
) -> OllamaWire:
    _keep_alive(st, info.name, req)
    return OllamaWire(model=info.name, received_ns=received, chat=chat)


def _keep_alive(st: ServerState, name: str, req: OllamaRequest) -> None:
    if req.keep_alive is not None:
        st.engine.keep_alive(name, req.keep_alive)


async def _load(st: ServerState, req: OllamaRequest, chat: bool) -> Response:
    """Ollama's way to load a model (a request without a prompt), or with keep_alive 0 to
    unload it (a model not loaded is not loaded for that)."""
    if req.keep_alive == 0:
        name = _served_name(st, req.model)
        if name in st.engine.stats().models_loaded:
            st.engine.keep_alive(name, 0)
        return JSONResponse(loaded(name, chat, reason="unload"))
    info = await st.models.get(req.model)
    _keep_alive(st, info.name, req)
    return JSONResponse(loaded(info.name, chat))


async def _raw_generate(
    request: Request, st: ServerState, req: OllamaGenerateRequest, received: int
) -> Response:
    """`raw`: the prompt as is, no chat template (so no images, no reasoning split);
    `suffix`: the fill-in-the-middle prompt of `prompt` and `suffix`, raw as well."""
    from mlxd.chat.session import start_completion

    if req.images:
        field = "suffix" if req.suffix is not None else "raw"
        raise InvalidRequest(
            f"images need the chat template: they cannot go with {field}", param=field
        )
    start = time.perf_counter()
    info = await st.models.get(req.model)
    prompt = req.prompt
    if req.suffix is not None:
        prompt = fill_in_prompt(info.tokenizer, req.prompt, req.suffix)
    try:
        options = ChatOptions.parse(req.options())
        stream = await asyncio.to_thread(
            start_completion, st.engine, info, prompt, options, MaxTokensPolicy.HALF_WINDOW
        )
    except InvalidRequest as err:
        raise in_client_terms(err, req.OPTION_FIELDS) from None
    _keep_alive(st, info.name, req)
    wire = OllamaWire(model=info.name, received_ns=received, chat=False)
    return await respond(request, st, stream, wire, req.stream, start, NDJSON)


@router.get("/api/tags")
async def tags(request: Request) -> Response:
    st = _state(request)
    ids = await st.models.list_ids()
    facts = await asyncio.to_thread(_facts, st, ids)
    return JSONResponse({"models": [tag_entry(f) for f in facts]})


@router.post("/api/show")
async def show(request: Request) -> Response:
    st = _state(request)
    req = parse(ShowRequest, await request.body(), st.settings)
    name = _served_name(st, req.served())
    if not await st.models.exists(name):
        raise ModelNotFound(f"model '{name}' not found", param="model")
    (facts,) = await asyncio.to_thread(_facts, st, [name])
    return JSONResponse(show_body(facts))


@router.get("/api/ps")
async def ps(request: Request) -> Response:
    st = _state(request)
    names = list(st.engine.stats().models_loaded)
    facts = await asyncio.to_thread(_facts, st, names)
    return JSONResponse({"models": [ps_entry(f) for f in facts]})


@router.get("/api/version")
async def version() -> Response:
    return JSONResponse({"version": OLLAMA_API_VERSION, "mlxd": __version__})


def _served_name(st: ServerState, requested: str | None) -> str:
    """The served model a request names, aliases applied ("" / "default": the preloaded one),
    without loading it."""
    name = st.models.aliased(requested or "default")
    default = st.models.default
    if name in ("", "default") and default is not None:
        return default.name
    return name


def _facts(st: ServerState, names: list[str]) -> list[ModelFacts]:
    """ModelFacts of `names`, from the store's catalog, else from the loaded model."""
    from mlxd.store.catalog import list_models

    try:
        entries: dict[str, CatalogEntry] = {e.id: e for e in list_models()}
    except Exception:  # the catalog is best effort, as for /v1/models
        entries = {}
    infos = {i.name: i for i in st.models.loaded.values()}
    return [ModelFacts.of(n, entries.get(n), infos.get(n)) for n in names]


@router.post("/api/embed")
async def embed_texts(request: Request) -> Response:
    received = time.perf_counter_ns()
    st = _state(request)
    req = parse(OllamaEmbedRequest, await request.body(), st.settings)
    asked = EmbedInput(req.texts(), req.dimensions, truncate=req.truncate)
    info, result = await embed(st, req.model, asked)
    _keep_alive(st, info.name, req)
    return JSONResponse(
        {
            "model": info.name,
            "embeddings": result.vectors,
            "total_duration": time.perf_counter_ns() - received,
            "load_duration": 0,
            "prompt_eval_count": result.prompt_tokens,
        }
    )


@router.post("/api/embeddings")
async def embeddings_legacy(request: Request) -> Response:
    st = _state(request)
    req = parse(OllamaEmbeddingsRequest, await request.body(), st.settings)
    info, result = await embed(st, req.model, EmbedInput([req.prompt], truncate=True))
    _keep_alive(st, info.name, req)
    return JSONResponse({"embedding": result.vectors[0]})


@router.post("/api/pull")
async def pull() -> Response:
    raise NotServed(
        "mlxd does not download models over HTTP (requests never download): "
        "run `mlxd pull MODEL` on the server, then use the model's name"
    )


@router.post("/api/push")
@router.post("/api/create")
@router.post("/api/copy")
@router.api_route("/api/blobs/{digest}", methods=["POST", "HEAD"])
async def manage() -> Response:
    raise NotServed(
        "mlxd does not manage models over HTTP: use the CLI on the server "
        "(`mlxd pull`, `mlxd list`, `mlxd rm`)"
    )


@router.delete("/api/delete")
async def delete() -> Response:
    raise NotServed("mlxd does not delete models over HTTP: run `mlxd rm MODEL` on the server")
