"""The app's routes: each API's own router (Ollama's under /api/), the chat page, then
/, /health, /health/models and /metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from mlxd.engine import RankStatus, ResidentModel
from mlxd.server.anthropic.routes import router as anthropic_router
from mlxd.server.embeddings.routes import router as embeddings_router
from mlxd.server.ollama.routes import router as ollama_router
from mlxd.server.openai.routes import router as openai_router
from mlxd.server.responses.routes import router as responses_router
from mlxd.server.state import server_state as _state
from mlxd.server.web.page import page_file
from mlxd.server.web.page import router as web_router

router = APIRouter()
router.include_router(anthropic_router)
router.include_router(responses_router)
router.include_router(openai_router)
router.include_router(embeddings_router)
router.include_router(web_router)
router.include_router(ollama_router)


@router.api_route("/", methods=["GET", "HEAD"])
async def root(request: Request) -> Response:
    """GET: the chat page (unless --no-web). Else where things are, for a client checking
    that the server answers (HEAD: no body)."""
    if request.method == "GET" and _state(request).settings.web:
        return page_file("/")
    return JSONResponse({"server": "mlxd", "api": "/v1", "health": "/health"})


@router.api_route("/health", methods=["GET", "HEAD"])
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
        "kv": _kv_json(h.kv_bytes_in_use, h.kv_budget_bytes),
    }
    if h.cluster is not None:
        body["ranks"] = [_rank_json(r) for r in h.cluster.ranks]
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/health/models")
async def resident_models(request: Request) -> Response:
    """What the engine holds now (`mlxd ps`): each loaded model, its requests and when it
    unloads, and the prefix cache. Cheap snapshots only; behind the API key, unlike /health."""
    st = _state(request)
    stats = st.engine.stats()
    default = st.models.default.name if st.models.default is not None else None
    cache = stats.cache
    return JSONResponse(
        {
            "models": [_resident_json(m, m.name == default) for m in st.engine.resident()],
            "running": stats.running,
            "waiting": stats.waiting,
            "prefix_cache": {
                "bytes": cache.bytes,
                "kv_bytes": cache.kv_bytes,
                "entries": cache.entries,
            },  # fmt: skip
        }
    )


def _resident_json(model: ResidentModel, default: bool) -> dict[str, object]:
    body = {k: getattr(model, k) for k in ResidentModel.__slots__ if k != "path"}
    return body | {"kind": model.kind.value, "default": default}


def _kv_json(in_use: int, budget: int | None) -> dict[str, int | None]:
    """/health's "kv": the KV bytes admission counts, its budget and what is left of it."""
    free = None if budget is None else max(budget - in_use, 0)
    return {"bytes_in_use": in_use, "budget_bytes": budget, "bytes_free": free}


def _rank_json(rank: RankStatus) -> dict[str, object]:
    """One rank in /health's "ranks" list (distributed serve)."""
    age = None if rank.heartbeat_age is None else round(rank.heartbeat_age, 3)
    return {"rank": rank.rank, "up": rank.up, "heartbeat_age_seconds": age}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    st = _state(request)
    text = st.metrics.render(st.engine.stats(), len(st.lifecycle.active))
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
