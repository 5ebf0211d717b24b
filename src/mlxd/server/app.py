"""The FastAPI app factory: routes, OpenAI-shaped errors, guard middleware, CORS for the allowed
origins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from mlxd import __version__
from mlxd.server.error_responses import install_handlers
from mlxd.server.guard.cors import Cors
from mlxd.server.guard.middleware import Guard
from mlxd.server.router import router
from mlxd.server.served_models import ServedModels
from mlxd.server.settings import ServerSettings
from mlxd.server.state import ServerState

if TYPE_CHECKING:
    from mlxd.engine import Engine, ModelInfo


def create_app(
    engine: Engine, settings: ServerSettings, default_model: ModelInfo | None = None
) -> FastAPI:
    """An app serving `engine`; `default_model` (a loaded ModelInfo) answers model "default".

    The engine is owned by the caller (`mlxd serve`), which closes it after the server stops.
    """
    app = FastAPI(
        title="mlxd",
        version=__version__,
        docs_url=None,  # no extra surface by default
        redoc_url=None,
        openapi_url=None,
    )
    models = ServedModels(engine, default_model, settings.trust_remote_code, settings.aliases)
    state = ServerState(engine=engine, settings=settings, models=models)
    app.state.mlxd = state
    install_handlers(app)
    app.include_router(router)
    app.add_middleware(Guard, settings=settings, metrics=state.metrics, lifecycle=state.lifecycle)
    if settings.allowed_origins:
        # Added last, so it runs first: browser preflights are answered before auth.
        app.add_middleware(Cors, origins=settings.allowed_origins)
    return app
