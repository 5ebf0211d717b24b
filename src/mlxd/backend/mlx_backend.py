"""The real Backend: mlx-lm models, BatchRunners and one prefix cache shared by all models."""

from __future__ import annotations

from pathlib import Path

from mlxd.backend import blas
from mlxd.backend.batch import BatchRunner, release_thread_streams
from mlxd.backend.loader import LoadedModel, load_checkpoint, load_with_draft
from mlxd.backend.memory import free_unused
from mlxd.backend.outputs import ClusterStats, FaultHook, PrefixCacheStats
from mlxd.backend.prefix.cache import PrefixCache
from mlxd.backend.prefix.disk_tier import DiskTier


class MlxBackend:
    """Every method runs on the engine thread."""

    def __init__(
        self,
        *,
        max_batch: int,
        prefill_chunk: int,
        prefill_batch: int,
        prefill_group_tokens: int,
        prefix_cache_bytes: int,
        prefix_cache_dir: str = "",
        prefix_cache_disk_bytes: int = 0,
        trust_remote_code: bool = False,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self.max_batch = max_batch
        self.prefill_chunk = prefill_chunk
        self.prefill_batch = prefill_batch
        self.prefill_group_tokens = prefill_group_tokens
        self.trust_remote_code = trust_remote_code
        self.fault_hook = fault_hook
        disk = (
            DiskTier(Path(prefix_cache_dir), prefix_cache_disk_bytes) if prefix_cache_dir else None
        )
        self.prefix_cache = PrefixCache(prefix_cache_bytes, disk)

    def load(self, path: Path, draft: Path | None = None) -> LoadedModel:
        """The model at `path`, with the draft model at `draft` attached (speculation)."""
        if draft is not None:
            return load_with_draft(path, draft, trust_remote_code=self.trust_remote_code)
        return load_checkpoint(path, trust_remote_code=self.trust_remote_code)

    def make_runner(self, name: str, model: LoadedModel) -> BatchRunner:
        self.prefix_cache.register(name, model.path)
        return BatchRunner(
            model,
            name,
            self.prefix_cache,
            max_batch=self.max_batch,
            prefill_chunk=self.prefill_chunk,
            prefill_batch=self.prefill_batch,
            prefill_group_tokens=self.prefill_group_tokens,
            fault_hook=self.fault_hook,
        )

    def unload(self, name: str) -> None:
        """The engine and the runner let go of model `name`: drop its prefix-cache entries,
        then hand MLX's cached buffers back to the system."""
        self.prefix_cache.drop(name)
        free_unused()

    def shutdown(self) -> None:
        """Last call: drop cached KV and this thread's MLX streams."""
        self.prefix_cache.clear()
        release_thread_streams()

    def cache_stats(self) -> PrefixCacheStats:
        return self.prefix_cache.stats()

    def blas(self) -> str:
        return blas.active().name

    def cluster(self) -> ClusterStats | None:
        return None  # one process (backend.distributed overrides this)
