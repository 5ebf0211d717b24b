"""What every route shares: the engine, settings, served models, metrics and lifecycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mlxd.server.lifecycle import Lifecycle
from mlxd.server.logprobs import TokenTexts
from mlxd.server.metrics import Metrics
from mlxd.server.served_models import ServedModels
from mlxd.server.settings import ServerSettings

if TYPE_CHECKING:
    from starlette.requests import Request

    from mlxd.engine import Engine, ModelInfo


@dataclass(slots=True)
class ServerState:
    engine: Engine
    settings: ServerSettings
    models: ServedModels
    metrics: Metrics = field(default_factory=Metrics)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    _texts: dict[str, TokenTexts] = field(default_factory=dict)

    def texts(self, info: ModelInfo) -> TokenTexts:
        """Per-model token-text cache for logprobs."""
        texts = self._texts.get(info.name)
        if texts is None:
            texts = self._texts[info.name] = TokenTexts(info.tokenizer)
        return texts


def server_state(request: Request) -> ServerState:
    """The state of the app serving `request` (set by server.app.create_app)."""
    state: ServerState = request.app.state.mlxd
    return state
