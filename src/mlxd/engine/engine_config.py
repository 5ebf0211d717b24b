"""EngineConfig: the engine's limits, read once from `mlxd.config` settings."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from mlxd import config as settings
from mlxd.backend.api import BackendConfig, FaultHook
from mlxd.config import (
    ENGINE_DEFAULTS,
    KV_BITS,
    KV_GROUP_SIZES,
    KV_KEY_BITS,
    parse_duration,
    setting_field,
    values_from_settings,
)
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind

__all__ = ["EngineConfig", "parse_duration"]


def _ms_to_s(ms: int) -> float:
    return ms / 1000


@dataclass(slots=True)
class EngineConfig:
    """Limits of one engine. Validated on construction; defaults and env vars are
    `mlxd.config.SETTINGS`."""

    max_batch: int = setting_field("max_batch")
    max_queue: int = setting_field("max_queue")
    prefill_chunk: int = setting_field("prefill_chunk")
    # Embeddings: each engine step also embeds up to embed_step_tokens padded input tokens,
    # and beside decoding rows what fits in embed_step_s at the measured cost (at least one
    # input; engine/embedding.py); a request holds at most embed_max_inputs inputs.
    embed_step_tokens: int = setting_field("embed_step_tokens")
    embed_step_s: float = setting_field("embed_step_ms", _ms_to_s)
    embed_max_inputs: int = setting_field("embed_max_inputs")
    kv_budget_tokens: int = setting_field("kv_budget_tokens")
    kv_budget_bytes: int = setting_field("kv_budget_bytes")  # 0: from memory left at load
    kv_bits: int = setting_field("kv_bits")  # 0: full precision (backend/kv)
    kv_group_size: int = setting_field("kv_group_size")
    kv_key_bits: int = setting_field("kv_key_bits")  # 0: as kv_bits; 16: 16-bit keys
    kv_quant_start: int = setting_field("kv_quant_start")  # recent positions kept exact
    prefix_cache_bytes: int = setting_field("prefix_cache_bytes")
    prefix_cache_dir: str = setting_field("prefix_cache_dir")  # "": no disk tier
    prefix_cache_disk_bytes: int = setting_field("prefix_cache_disk_bytes")
    max_tokens_ceiling: int | None = setting_field("max_tokens_ceiling")
    watchdog_seconds: float = setting_field("watchdog_seconds")
    trust_remote_code: bool = False
    # Prefill is first come first served. Waiting prompts are prefilled side by side (at most
    # prefill_batch of them) while they cost less than a group's steps to its first token,
    # and, unless compute-bound, a queue in the groups with the least mean plus longest wait
    # (backend/prefill_plan.py, from measured step costs; until they are measured, while the
    # padded group, longest prompt x count, stays within prefill_group_tokens): short bursts
    # start together, long prompts go one at a time so the first streams early (0 disables
    # grouping: always prefill_batch prompts per group).
    prefill_batch: int = ENGINE_DEFAULTS["prefill_batch"]
    prefill_group_tokens: int = ENGINE_DEFAULTS["prefill_group_tokens"]
    # Residency: at most max_models stay loaded (least recently used idle ones unload first;
    # a model with requests waiting or running never does); an idle model unloads after
    # model_ttl_seconds (0: never). Pinned models are exempt from both.
    max_models: int = setting_field("max_models")
    model_ttl_seconds: float = setting_field("model_ttl_seconds")
    # Consumers of running streams are woken at most once per stream_interval_s (0: every
    # step); first tokens, the tokens of a consumer that shows nothing yet (until_shown) and
    # finishes are delivered at once, and pending tokens before any step that prefills.
    # Each wake-up costs a consumer thread or event loop GIL time that
    # the engine thread waits for; on small fast models (a step of 1-3 ms) waking every step
    # costs ~5% of throughput, while 50 updates per second read the same to a person.
    stream_interval_s: float = setting_field("stream_interval_ms", _ms_to_s)
    # Speculative decoding for requests that do not choose (SamplingParams.draft_kind None):
    # the draft kind (None: `model` on a model loaded with a draft, else `none`) and the most
    # draft tokens a row verifies per step (docs/engine-design.md).
    draft_kind: DraftKind | None = None
    num_draft_tokens: int = ENGINE_DEFAULTS["num_draft_tokens"]
    fault_hook: FaultHook | None = None

    def __post_init__(self) -> None:
        names = (
            "max_batch",
            "prefill_chunk",
            "kv_budget_tokens",
            "prefill_batch",
            "max_models",
            "embed_step_tokens",
            "embed_max_inputs",
        )
        for name in names:
            if getattr(self, name) < 1:
                raise InvalidRequest(f"engine setting {name} must be >= 1", param=name)
        sizes = [self.max_queue, self.prefix_cache_bytes, self.prefix_cache_disk_bytes]
        sizes += [self.kv_budget_bytes, self.kv_quant_start]
        if min(sizes) < 0 or self.prefill_group_tokens < 0:
            raise InvalidRequest(
                "engine settings max_queue, prefix_cache_bytes, prefix_cache_disk_bytes, "
                "kv_budget_bytes and kv_quant_start must be >= 0"
            )
        if self.kv_bits not in (0, *KV_BITS) or self.kv_group_size not in KV_GROUP_SIZES:
            raise InvalidRequest(
                f"engine setting kv_bits must be 0 or one of {KV_BITS} and kv_group_size one "
                f"of {KV_GROUP_SIZES} (got {self.kv_bits}, {self.kv_group_size})",
                param="kv_bits",
            )
        if self.kv_key_bits not in (0, *KV_KEY_BITS):
            raise InvalidRequest(
                f"engine setting kv_key_bits must be 0 or one of {KV_KEY_BITS} "
                f"(got {self.kv_key_bits})",
                param="kv_key_bits",
            )
        if self.max_tokens_ceiling is not None and self.max_tokens_ceiling < 1:
            self.max_tokens_ceiling = None  # 0 in the settings table means "no ceiling"
        settings.SAMPLING_BOUNDS["num_draft_tokens"].check(
            "num_draft_tokens", self.num_draft_tokens
        )
        if self.watchdog_seconds <= 0:
            raise InvalidRequest("engine setting watchdog_seconds must be > 0")
        if not 0 <= self.stream_interval_s <= 1:
            raise InvalidRequest(
                "engine setting stream_interval_s must be within [0, 1] seconds",
                param="stream_interval_s",
            )
        if not 0 <= self.model_ttl_seconds < math.inf:
            raise InvalidRequest(
                "engine setting model_ttl_seconds must be >= 0 (0: never unload)",
                param="model_ttl_seconds",
            )

    @property
    def backend(self) -> BackendConfig:
        """The backend's part of this config: the fields BackendConfig shares with it."""
        return BackendConfig(**{f.name: getattr(self, f.name) for f in fields(BackendConfig)})

    @classmethod
    def from_settings(cls, **overrides: object) -> EngineConfig:
        """Values from `mlxd.config` (env vars included); keyword arguments override them."""
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown EngineConfig fields: {sorted(unknown)}")
        try:
            values = values_from_settings(cls)
        except ValueError as exc:
            raise InvalidRequest(f"bad engine setting in the environment: {exc}") from exc
        values.update(overrides)
        return cls(**values)
