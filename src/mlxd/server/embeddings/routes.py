"""`POST /v1/embeddings`: parse, then the shared embeddings route body (generation.embed)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from mlxd.server.embeddings.schemas import EmbeddingsRequest, embeddings_body
from mlxd.server.generation import embed
from mlxd.server.request_inputs import parse
from mlxd.server.state import server_state

router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    st = server_state(request)
    req = parse(EmbeddingsRequest, await request.body(), st.settings)
    info, result = await embed(st, req.model, req.embed_input())
    return JSONResponse(embeddings_body(info.name, result, req.encoding_format))
