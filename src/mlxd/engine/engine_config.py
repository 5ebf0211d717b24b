"""EngineConfig: the engine's limits, read once from `mlxd.config` settings."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from mlxd import config as settings
from mlxd.backend.outputs import FaultHook
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float) -> float:
    """Seconds from "300", "2.5", "500ms", "30s", "5m", "1h" or "1h30m" (ollama-style
    keep-alive spellings); raises ValueError on anything else, negative values included."""
    if isinstance(text, int | float):
        return float(text)
    spec = text.strip().lower()
    parts = list(_DURATION.finditer(spec))
    if not spec or "".join(m.group(0) for m in parts).replace(" ", "") != spec.replace(" ", ""):
        raise ValueError(f"not a duration: {text!r} (use seconds, or e.g. 30s, 5m, 1h)")
    if len(parts) > 1 and any(m.group(2) is None for m in parts):
        raise ValueError(f"not a duration: {text!r} (every part of it needs a unit)")
    return sum(float(m.group(1)) * _UNIT_SECONDS[m.group(2) or "s"] for m in parts)


def _setting_values(text: Callable[[str], str]) -> dict[str, Any]:
    """The EngineConfig fields that come from `mlxd.config` settings; `text(name)` gives a
    setting's text (its default, or the environment). Raises ValueError naming the setting."""

    def duration(name: str) -> float:
        try:
            return parse_duration(text(name))
        except ValueError as exc:
            raise ValueError(f"{settings.SETTINGS[name].env}: {exc}") from None

    return {
        "max_batch": int(text("max_batch")),
        "max_queue": int(text("max_queue")),
        "prefill_chunk": int(text("prefill_chunk")),
        "kv_budget_tokens": int(text("kv_budget_tokens")),
        "prefix_cache_bytes": int(text("prefix_cache_bytes")),
        "prefix_cache_dir": text("prefix_cache_dir"),
        "prefix_cache_disk_bytes": int(text("prefix_cache_disk_bytes")),
        "max_tokens_ceiling": int(text("max_tokens_ceiling")) or None,  # 0 means "none"
        "watchdog_seconds": float(text("watchdog_seconds")),
        "max_models": int(text("max_models")),
        "model_ttl_seconds": duration("model_ttl_seconds"),
        "stream_interval_s": int(text("stream_interval_ms")) / 1000,
    }


_DEFAULTS = _setting_values(settings.default)


@dataclass(slots=True)
class EngineConfig:
    """Limits of one engine. Validated on construction; defaults and env vars are
    `mlxd.config.SETTINGS`."""

    max_batch: int = _DEFAULTS["max_batch"]
    max_queue: int = _DEFAULTS["max_queue"]
    prefill_chunk: int = _DEFAULTS["prefill_chunk"]
    kv_budget_tokens: int = _DEFAULTS["kv_budget_tokens"]
    prefix_cache_bytes: int = _DEFAULTS["prefix_cache_bytes"]
    prefix_cache_dir: str = _DEFAULTS["prefix_cache_dir"]  # "": no disk tier
    prefix_cache_disk_bytes: int = _DEFAULTS["prefix_cache_disk_bytes"]
    max_tokens_ceiling: int | None = _DEFAULTS["max_tokens_ceiling"]
    watchdog_seconds: float = _DEFAULTS["watchdog_seconds"]
    trust_remote_code: bool = False
    # Prefill is first come first served. Waiting prompts are prefilled side by side (at most
    # prefill_batch of them) while they cost less than a group's steps to its first token,
    # and, unless compute-bound, a queue in the groups with the least mean plus longest wait
    # (backend/prefill_plan.py, from measured step costs; until they are measured, while the
    # padded group, longest prompt x count, stays within prefill_group_tokens): short bursts
    # start together, long prompts go one at a time so the first streams early (0 disables
    # grouping: always prefill_batch prompts per group).
    prefill_batch: int = 16
    prefill_group_tokens: int = 256
    # Residency: at most max_models stay loaded (least recently used idle ones unload first;
    # a model with requests waiting or running never does); an idle model unloads after
    # model_ttl_seconds (0: never). Pinned models are exempt from both.
    max_models: int = _DEFAULTS["max_models"]
    model_ttl_seconds: float = _DEFAULTS["model_ttl_seconds"]
    # Consumers of running streams are woken at most once per stream_interval_s (0: every
    # step); first tokens, the tokens of a consumer that shows nothing yet (until_shown) and
    # finishes are delivered at once, and pending tokens before any step that prefills.
    # Each wake-up costs a consumer thread or event loop GIL time that
    # the engine thread waits for; on small fast models (a step of 1-3 ms) waking every step
    # costs ~5% of throughput, while 50 updates per second read the same to a person.
    stream_interval_s: float = _DEFAULTS["stream_interval_s"]
    # Speculative decoding for requests that do not choose (SamplingParams.draft_kind None):
    # the draft kind (None: `model` on a model loaded with a draft, else `none`) and the most
    # draft tokens a row verifies per step (docs/engine-design.md).
    draft_kind: DraftKind | None = None
    num_draft_tokens: int = 4
    fault_hook: FaultHook | None = None

    def __post_init__(self) -> None:
        names = ("max_batch", "prefill_chunk", "kv_budget_tokens", "prefill_batch", "max_models")
        for name in names:
            if getattr(self, name) < 1:
                raise InvalidRequest(f"engine setting {name} must be >= 1", param=name)
        sizes = (self.max_queue, self.prefix_cache_bytes, self.prefix_cache_disk_bytes)
        if min(sizes) < 0 or self.prefill_group_tokens < 0:
            raise InvalidRequest(
                "engine settings max_queue, prefix_cache_bytes and prefix_cache_disk_bytes "
                "must be >= 0"
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

    @classmethod
    def from_settings(cls, **overrides: object) -> EngineConfig:
        """Values from `mlxd.config` (env vars included); keyword arguments override them."""
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown EngineConfig fields: {sorted(unknown)}")
        try:
            values = _setting_values(settings.setting)
        except ValueError as exc:
            raise InvalidRequest(f"bad engine setting in the environment: {exc}") from exc
        values.update(overrides)
        return cls(**values)
