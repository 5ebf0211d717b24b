"""The server's own settings: resolved once from config (env) and CLI flags."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from mlxd.config import setting_field, values_from_settings
from mlxd.errors import InvalidRequest
from mlxd.server.origin import parse_origins

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What the HTTP layer needs; engine limits live in EngineConfig. Defaults and env vars
    are `mlxd.config.SETTINGS`."""

    host: str = setting_field("host")
    port: int = setting_field("port")
    ollama_port: int = setting_field("ollama_port")  # a second listener (0: none)
    api_key: str = setting_field("api_key")
    allowed_origins: tuple[str, ...] = setting_field("allowed_origins", parse_origins)
    max_body_bytes: int = setting_field("max_body_bytes")
    header_timeout: float = setting_field("header_timeout_seconds")
    body_timeout: float = setting_field("body_timeout_seconds")
    keep_alive: float = setting_field("keep_alive_seconds")
    stream_keepalive: float = setting_field("stream_keepalive_seconds")  # 0: no keep-alives
    max_connections: int = setting_field("max_connections")
    drain_seconds: float = setting_field("drain_seconds")
    trust_remote_code: bool = False
    request_chat_template: bool = setting_field("request_chat_template")
    allow_image_urls: bool = setting_field("allow_image_urls")  # fetch http(s) image URLs
    web: bool = setting_field("web")  # the chat page at /
    aliases: tuple[tuple[str, str], ...] = ()  # (name pattern, model): --alias NAME=MODEL
    reasoning: tuple[str, str] | None = None  # --reasoning-start/--reasoning-end (None: detect)

    @classmethod
    def from_config(cls, **overrides: object) -> ServerSettings:
        """Config/env defaults, then non-None overrides (CLI flags)."""
        try:
            values = values_from_settings(cls)
        except ValueError as exc:
            raise InvalidRequest(f"bad server setting in the environment: {exc}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        for name in ("port", "ollama_port"):
            if not 0 <= getattr(settings, name) <= 65535:
                raise InvalidRequest(
                    f"{name} {getattr(settings, name)} is not in 0..65535", param=name
                )
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
