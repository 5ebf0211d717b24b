"""Prefix cache: KV caches of finished requests keyed by their token ids (mlx-lm's
`LRUPromptCache`, bounded in bytes), shared by every model the engine runs."""

from __future__ import annotations

from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache

from mlxd.backend.mlx_lm_compat import PromptCache, drop_model, trim_cache

# Bytes decide eviction; the entry count only guards against pathological tiny entries.
_MAX_ENTRIES = 1 << 16


class PrefixCache:
    """`fetch` returns a private copy of the longest usable prefix; `store` keeps a cache."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lru = LRUPromptCache(max_size=_MAX_ENTRIES, max_bytes=max(max_bytes, 0))

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def nbytes(self) -> int:
        return int(self._lru.nbytes)

    def __len__(self) -> int:
        return len(self._lru)

    def fetch(self, model_key: str, tokens: list[int]) -> tuple[PromptCache | None, list[int]]:
        """(cache, rest): the cache holds len(tokens) - len(rest) tokens; rest is never empty,
        since the last prompt token must run through the model to give the first logits."""
        if not self.enabled:
            return None, tokens
        cache, rest = self._lru.fetch_nearest_cache(model_key, tokens)
        if cache is not None and not rest:
            if can_trim_prompt_cache(cache) and trim_cache(cache, 1) == 1:
                return cache, tokens[-1:]
            return None, tokens
        return cache, list(rest)

    def store(self, model_key: str, tokens: list[int], cache: PromptCache) -> None:
        if self.enabled and tokens and cache:
            self._lru.insert_cache(model_key, list(tokens), cache)

    def drop(self, model_key: str) -> int:
        """Forget every entry of one model (it was unloaded); returns how many went."""
        return drop_model(self._lru, model_key)

    def clear(self) -> None:
        self._lru.trim_to(n_sequences=0)
