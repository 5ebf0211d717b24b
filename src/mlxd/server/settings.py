"""The server's own settings: resolved once from config (env) and CLI flags."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlxd.config import default, setting
from mlxd.errors import InvalidRequest
from mlxd.server.origin import parse_origins

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _setting_values(text: Callable[[str], str]) -> dict[str, Any]:
    """The ServerSettings fields that come from `mlxd.config` settings; `text(name)` gives a
    setting's text (its default, or the environment). Raises ValueError."""
    return {
        "host": text("host"),
        "port": int(text("port")),
        "api_key": text("api_key"),
        "allowed_origins": parse_origins(text("allowed_origins")),
        "max_body_bytes": int(text("max_body_bytes")),
        "header_timeout": float(text("header_timeout_seconds")),
        "body_timeout": float(text("body_timeout_seconds")),
        "keep_alive": float(text("keep_alive_seconds")),
        "max_connections": int(text("max_connections")),
        "drain_seconds": float(text("drain_seconds")),
        "request_chat_template": text("request_chat_template") == "1",
        "allow_image_urls": text("allow_image_urls") == "1",
    }


_DEFAULTS = _setting_values(default)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What the HTTP layer needs; engine limits live in EngineConfig. Defaults and env vars
    are `mlxd.config.SETTINGS`."""

    host: str = _DEFAULTS["host"]
    port: int = _DEFAULTS["port"]
    api_key: str = _DEFAULTS["api_key"]
    allowed_origins: tuple[str, ...] = _DEFAULTS["allowed_origins"]
    max_body_bytes: int = _DEFAULTS["max_body_bytes"]
    header_timeout: float = _DEFAULTS["header_timeout"]
    body_timeout: float = _DEFAULTS["body_timeout"]
    keep_alive: float = _DEFAULTS["keep_alive"]
    max_connections: int = _DEFAULTS["max_connections"]
    drain_seconds: float = _DEFAULTS["drain_seconds"]
    trust_remote_code: bool = False
    request_chat_template: bool = _DEFAULTS["request_chat_template"]
    allow_image_urls: bool = _DEFAULTS["allow_image_urls"]  # fetch http(s) image URLs
    aliases: tuple[tuple[str, str], ...] = ()  # (name pattern, model): --alias NAME=MODEL

    @classmethod
    def from_config(cls, **overrides: object) -> ServerSettings:
        """Config/env defaults, then non-None overrides (CLI flags)."""
        try:
            values = _setting_values(setting)
        except ValueError as exc:
            raise InvalidRequest(f"bad server setting in the environment: {exc}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        if not 0 <= settings.port <= 65535:
            raise InvalidRequest(f"port {settings.port} is not in 0..65535", param="port")
        return settings

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect (the DNS-rebinding guard applies)."""
        return is_loopback_host(self.host)


def is_loopback_host(host: str) -> bool:
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
