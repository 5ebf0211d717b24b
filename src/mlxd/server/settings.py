"""The server's own settings: resolved once from config (env) and CLI flags."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from mlxd.config import default, default_float, default_int, setting, setting_int
from mlxd.errors import InvalidRequest
from mlxd.server.origin import parse_origins

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What the HTTP layer needs; engine limits live in EngineConfig."""

    host: str = default("host")
    port: int = default_int("port")
    api_key: str = default("api_key")
    allowed_origins: tuple[str, ...] = ()
    max_body_bytes: int = default_int("max_body_bytes")
    header_timeout: float = default_float("header_timeout_seconds")
    body_timeout: float = default_float("body_timeout_seconds")
    keep_alive: float = default_float("keep_alive_seconds")
    max_connections: int = default_int("max_connections")
    max_stop_strings: int = default_int("max_stop_strings")
    drain_seconds: float = default_float("drain_seconds")
    trust_remote_code: bool = False
    request_chat_template: bool = default("request_chat_template") == "1"
    # chat_template_kwargs keys passed to the template; any other key is a 400.
    template_kwargs_allowed: frozenset[str] = field(
        default_factory=lambda: frozenset({"enable_thinking", "thinking", "reasoning_effort"})
    )

    @classmethod
    def from_config(cls, **overrides: object) -> ServerSettings:
        """Config/env defaults, then non-None overrides (CLI flags)."""
        try:
            values: dict[str, object] = {
                "host": setting("host"),
                "port": setting_int("port"),
                "api_key": setting("api_key"),
                "allowed_origins": parse_origins(setting("allowed_origins")),
                "max_body_bytes": setting_int("max_body_bytes"),
                "header_timeout": float(setting("header_timeout_seconds")),
                "body_timeout": float(setting("body_timeout_seconds")),
                "keep_alive": float(setting("keep_alive_seconds")),
                "max_connections": setting_int("max_connections"),
                "max_stop_strings": setting_int("max_stop_strings"),
                "drain_seconds": float(setting("drain_seconds")),
                "request_chat_template": setting("request_chat_template") == "1",
            }
        except ValueError as exc:
            raise InvalidRequest(f"bad server setting in the environment: {exc}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)  # type: ignore[arg-type]
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
