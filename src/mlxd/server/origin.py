"""Cross-site request refusal: a request carrying an `Origin` not explicitly allowed gets 403.

Browsers send `Origin` on every cross-site POST, also on the "simple" ones that skip the CORS
preflight (text/plain, form and multipart bodies), so without this check any web page could
make a local server generate or load models. Clients that are not browsers (curl, SDKs) send
no `Origin` and are not affected.
"""

from __future__ import annotations

import ipaddress
import re

from mlxd.errors import MlxdError

ANY_ORIGIN = "*"


class OriginNotAllowed(MlxdError):
    http_status = 403
    error_type = "invalid_request_error"
    code = "origin_not_allowed"


def parse_origins(text: str) -> tuple[str, ...]:
    """`MLXD_ALLOWED_ORIGINS` (or one flag value): origins separated by commas or spaces."""
    return tuple(normalize(o) for o in re.split(r"[,\s]+", text) if o.strip())


def normalize(origin: str) -> str:
    """Origins compare case-insensitively (scheme and host) and without a trailing slash."""
    return origin.strip().rstrip("/").lower()


def origin_allowed(origin: str, allowed: frozenset[str]) -> bool:
    """`allowed` holds normalized origins (see `normalize`), or `*` for any."""
    return ANY_ORIGIN in allowed or normalize(origin) in allowed


def refusal(origin: str) -> OriginNotAllowed:
    shown = origin if len(origin) <= 200 else origin[:200] + "..."
    return OriginNotAllowed(
        f"cross-site request from origin '{shown}' refused; allow it with "
        "--allowed-origins or MLXD_ALLOWED_ORIGINS"
    )


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """True when `origin` is this server's own (`scheme://host` of the request), as for the
    chat page at /, and the host is an IP address or `localhost`.

    A DNS name is never trusted this way: another site can rebind its own name to this
    server's address, and its pages would then look same-origin (allow such names with
    --allowed-origins). A loopback server also refuses non-loopback Host headers first.
    """
    name = host_name(host.strip().lower())
    if name != "localhost":
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
    return normalize(origin) == f"{scheme.lower()}://{host.strip().lower()}"


def host_name(host: str) -> str:
    """A Host header without its port ('[::1]:80' -> '::1', 'a:80' -> 'a')."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
