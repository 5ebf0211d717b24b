"""Models made from models already on disk: `convert_model` (an MLX checkpoint, maybe quantized,
in the store) and `clone_model` (a plain-file working copy of a cached model)."""

from mlxd.store.derived.conversion import ConvertResult, convert_model
from mlxd.store.derived.working_copy import CloneResult, clone_model

__all__ = ["CloneResult", "ConvertResult", "clone_model", "convert_model"]
