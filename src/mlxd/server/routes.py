"""HTTP routes: chat and text completions, models, health, metrics; Anthropic's messages and
OpenAI's Responses come from their own modules."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from mlxd.engine import RankStatus
from mlxd.errors import ModelNotFound
from mlxd.server import anthropic_api, responses_api
from mlxd.server.generation import respond, start_chat_stream
from mlxd.server.inputs import chat_inputs, parse, request_template
from mlxd.server.schemas import ChatCompletionRequest, CompletionRequest
from mlxd.server.served_models import DEFAULT_ALIASES
from mlxd.server.state import server_state as _state
from mlxd.server.wire import ChatWire, CompletionWire

router = APIRouter()
router.include_router(anthropic_api.router)
router.include_router(responses_api.router)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    st = _state(request)
    start = time.perf_counter()
    req = parse(ChatCompletionRequest, await request.body(), st.settings)
    template = request_template(req, st.settings)
    info = await st.models.get(req.model)
    stream = await start_chat_stream(st, info, req, chat_inputs(req), template)
    texts = st.texts(info) if req.logprobs else None
    wire = ChatWire(model=info.name, texts=texts, include_usage=req.include_usage)
    return await respond(request, st, stream, wire, req.stream, start)


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    from mlxd.chat.session import start_completion

    st = _state(request)
    start = time.perf_counter()
    req = parse(CompletionRequest, await request.body(), st.settings)
    info = await st.models.get(req.model)
    stream = await asyncio.to_thread(
        lambda: start_completion(
            st.engine, info, req.prompt_text(), options=req.options(), server_defaults=True
        )
    )
    texts = st.texts(info) if req.logprobs is not None else None
    wire = CompletionWire(model=info.name, texts=texts, include_usage=req.include_usage)
    return await respond(request, st, stream, wire, req.stream, start)


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    st = _state(request)
    ids = await st.models.list_ids()
    return JSONResponse({"object": "list", "data": [st.models.card(i) for i in ids]})


@router.get("/v1/models/{model_id:path}")
async def get_model(request: Request, model_id: str) -> Response:
    st = _state(request)
    default = st.models.default
    model_id = st.models.aliased(model_id)
    if model_id in DEFAULT_ALIASES and default is not None:  # as "model": "default" does
        return JSONResponse(st.models.card(default.name))
    if not await st.models.exists(model_id):
        raise ModelNotFound(f"model '{model_id}' is not known", param="model")
    return JSONResponse(st.models.card(model_id))


@router.get("/health")
async def health(request: Request) -> Response:
    """Reads engine.health() only (never blocks), so it answers during long prefills."""
    st = _state(request)
    h = st.engine.health()
    ok = bool(h.ok) and not st.lifecycle.draining
    state = "shutting_down" if st.lifecycle.draining else str(getattr(h, "state", ""))
    body = {
        "status": "ok" if ok else "unavailable",
        "state": state,
        "detail": getattr(h, "detail", None),
        "model": st.models.default.name if st.models.default is not None else None,
        "draft": st.models.draft(st.models.default.name) if st.models.default else None,
        "blas": h.blas,
    }
    if h.cluster is not None:
        body["ranks"] = [_rank_json(r) for r in h.cluster.ranks]
    return JSONResponse(body, status_code=200 if ok else 503)


def _rank_json(rank: RankStatus) -> dict[str, object]:
    """One rank in /health's "ranks" list (distributed serve)."""
    age = None if rank.heartbeat_age is None else round(rank.heartbeat_age, 3)
    return {"rank": rank.rank, "up": rank.up, "heartbeat_age_seconds": age}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    st = _state(request)
    text = st.metrics.render(st.engine.stats(), len(st.lifecycle.active))
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
