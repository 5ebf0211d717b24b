"""The real Backend: mlx-lm models, BatchRunners and one prefix cache shared by all models."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mlxd.backend import blas
from mlxd.backend.api import (
    BackendConfig,
    ClusterStats,
    KvFootprint,
    LoadedModel,
    PrefixCacheStats,
)
from mlxd.backend.batch import BatchRunner, release_thread_streams, unbatchable_layers
from mlxd.backend.headroom import available_memory
from mlxd.backend.kv import kv_footprint, quantize_kv
from mlxd.backend.loader import load_checkpoint, load_with_draft, refuse_remote_code
from mlxd.backend.memory import free_unused
from mlxd.backend.prefix import DiskTier, PrefixCache
from mlxd.backend.speculation.dflash_load import check_dflash_fit, is_dflash_drafter, with_dflash
from mlxd.backend.speculation.draft_kv import drafter_footprint, mtp_footprint
from mlxd.backend.speculation.mtp_head import with_mtp_head


class MlxBackend:
    """Every method runs on the engine thread."""

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.trust_remote_code = config.trust_remote_code
        disk = (
            DiskTier(Path(config.prefix_cache_dir), config.prefix_cache_disk_bytes)
            if config.prefix_cache_dir
            else None
        )
        self.prefix_cache = PrefixCache(config.prefix_cache_bytes, disk)

    def load(self, path: Path, draft: Path | None = None) -> LoadedModel:
        """The model at `path`, with the draft model at `draft` attached (speculation), its
        KV bytes per token and the memory left once it is loaded; a KV precision the model
        cannot take (backend.kv) is refused here, before any request."""
        if draft is not None and is_dflash_drafter(Path(draft).expanduser()):
            loaded = self._load_with_dflash(Path(path).expanduser(), Path(draft).expanduser())
        elif draft is not None:
            loaded = load_with_draft(path, draft, trust_remote_code=self.trust_remote_code)
        else:
            loaded = load_checkpoint(path, trust_remote_code=self.trust_remote_code)
        if loaded.embedder is not None:
            return loaded
        self._quantize_kv(loaded.model)
        loaded = with_mtp_head(loaded)  # before the headroom: the head's weights count too
        room = available_memory()
        return replace(
            loaded,
            kv=kv_footprint(loaded.model),
            draft_kv=drafter_footprint(loaded),
            mtp_kv=mtp_footprint(loaded.mtp) if loaded.mtp is not None else KvFootprint(),
            kv_headroom=room[0] if room else None,
            unbatchable=unbatchable_layers(loaded.model),
        )

    def _load_with_dflash(self, path: Path, draft: Path) -> LoadedModel:
        """The model at `path` with the DFlash drafter at `draft`: the pair is checked from
        their configs before any weights load (speculation.dflash_load)."""
        check_dflash_fit(path, draft)
        if not self.trust_remote_code:
            refuse_remote_code(draft)
        return with_dflash(load_checkpoint(path, trust_remote_code=self.trust_remote_code), draft)

    def make_runner(self, name: str, model: LoadedModel) -> BatchRunner:
        """A runner for `model`, whose caches have the configured KV precision (backend.kv;
        set again for a model another backend loaded, before the prefix cache probes it)."""
        self._quantize_kv(model.model)
        self.prefix_cache.register(name, model.path, model.model)
        return BatchRunner(model, name, self.prefix_cache, self.config)

    def _quantize_kv(self, model: object) -> None:
        c = self.config
        quantize_kv(model, c.kv_bits, c.kv_group_size, c.kv_quant_start, c.kv_key_bits)

    def unload(self, name: str) -> None:
        """The engine and the runner let go of model `name`: drop its prefix-cache entries,
        then hand MLX's cached buffers back to the system."""
        self.prefix_cache.drop(name)
        free_unused()

    def shutdown(self) -> None:
        """Last call: drop cached KV and this thread's MLX streams."""
        self.prefix_cache.close()
        release_thread_streams()

    def cache_stats(self) -> PrefixCacheStats:
        return self.prefix_cache.stats()

    def blas(self) -> str:
        return blas.active().name

    def cluster(self) -> ClusterStats | None:
        return None  # one process (backend.distributed overrides this)
