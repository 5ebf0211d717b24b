"""The real Backend: mlx-lm models, BatchRunners and one prefix cache shared by all models."""

from __future__ import annotations

from pathlib import Path

from mlxd.backend.batch import BatchRunner, release_thread_streams, vocab_size
from mlxd.backend.loader import load_checkpoint
from mlxd.backend.memory import free_unused
from mlxd.backend.prefix import PrefixCache
from mlxd.engine.config import EngineConfig
from mlxd.engine.loaded_models import ModelEntry, ModelInfo


class MlxBackend:
    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.prefix_cache = PrefixCache(cfg.prefix_cache_bytes)

    def load(self, name: str, path: Path) -> ModelEntry:
        loaded = load_checkpoint(path, trust_remote_code=self.cfg.trust_remote_code)
        info = ModelInfo(
            name=name,
            path=loaded.path,
            tokenizer=loaded.tokenizer,
            context_window=loaded.context_window,
            generation_defaults=dict(loaded.generation_defaults),
            config=dict(loaded.config),
            eos_token_ids=set(loaded.eos_token_ids),
            vocab_size=vocab_size(loaded),
        )
        return ModelEntry(info=info, loaded=loaded)

    def make_runner(self, entry: ModelEntry) -> BatchRunner:
        return BatchRunner(
            entry.loaded,
            entry.info.name,
            self.prefix_cache,
            max_batch=self.cfg.max_batch,
            prefill_chunk=self.cfg.prefill_chunk,
            prefill_batch=self.cfg.prefill_batch,
            prefill_group_tokens=self.cfg.prefill_group_tokens,
            fault_hook=self.cfg.fault_hook,
        )

    def unload(self, name: str) -> None:
        """Engine thread: the engine and the runner let go of model `name`; drop its
        prefix-cache entries, then hand MLX's cached buffers back to the system."""
        self.prefix_cache.drop(name)
        free_unused()

    def shutdown(self) -> None:
        """Engine thread, last call: drop cached KV and this thread's MLX streams."""
        self.prefix_cache.clear()
        release_thread_streams()

    def cache_stats(self) -> tuple[int, int]:
        return self.prefix_cache.nbytes, len(self.prefix_cache)
