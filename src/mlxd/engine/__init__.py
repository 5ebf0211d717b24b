"""The one in-process engine behind `mlxd run`, `mlxd chat` and `mlxd serve`.

Speaks token ids only; see docs/ARCHITECTURE.md and docs/engine-design.md. Importing this
package does not import mlx: the backend loads when the first Engine is built.
"""

from mlxd.engine.embedding import EmbedHandle, EmbedRequest, EmbedResult
from mlxd.engine.engine import Engine
from mlxd.engine.engine_config import EngineConfig
from mlxd.engine.handle import RequestHandle
from mlxd.engine.loaded_models import ModelInfo
from mlxd.engine.request import EngineRequest, RequestStatus
from mlxd.engine.stats import (
    ClusterStats,
    EngineHealth,
    EngineState,
    EngineStats,
    RankStatus,
    ResidentModel,
)

__all__ = [
    "ClusterStats",
    "EmbedHandle",
    "EmbedRequest",
    "EmbedResult",
    "Engine",
    "EngineConfig",
    "EngineHealth",
    "EngineRequest",
    "EngineState",
    "EngineStats",
    "ModelInfo",
    "RankStatus",
    "RequestHandle",
    "RequestStatus",
    "ResidentModel",
]
