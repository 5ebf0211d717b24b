"""`mlxd ps`: what a running `mlxd serve` holds (GET /health/models): each loaded model, its
kind, weights in memory, draft, requests running and queued, when it unloads; the prefix cache."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mlxd.cli.render import human_size, print_json

if TYPE_CHECKING:
    from mlxd.cli.main import Subparsers


def add_parser(sub: Subparsers) -> None:
    from mlxd.config import SETTINGS

    p = sub.add_parser("ps", help="what a running server holds: loaded models, requests, TTLs")
    p.add_argument(
        "--server",
        metavar="URL",
        help="the `mlxd serve` to ask (default: "
        f"{SETTINGS['server'].env}, else 127.0.0.1 on {SETTINGS['port'].env}'s port)",
    )
    p.add_argument(
        "--api-key", metavar="KEY", help=f"the server's key [env {SETTINGS['api_key'].env}]"
    )
    p.add_argument("--json", action="store_true", help="print the server's answer as JSON")
    p.set_defaults(func=cmd_ps)


def cmd_ps(args: argparse.Namespace) -> int:
    from mlxd.cli.client.http_model import HttpModel, server_address
    from mlxd.cli.client.model_client import api_key
    from mlxd.config import setting

    url = args.server or setting("server") or f"127.0.0.1:{setting('port')}"
    body = HttpModel(server_address(url), "default", api_key(args)).resident()
    if args.json:
        print_json(body)
        return 0
    header = ["NAME", "KIND", "MEMORY", "DRAFT", "RUNNING", "QUEUED", "UNLOADS"]
    rows = [_row(m) for m in body["models"]]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    cache = body.get("prefix_cache") or {}
    print(
        f"prefix cache: {human_size(cache.get('bytes', 0))} in {cache.get('entries', 0)} "
        f"entries; {body.get('running', 0)} running, {body.get('waiting', 0)} waiting"
    )
    return 0


def _row(model: dict[str, Any]) -> list[str]:
    name = str(model["name"]) + (" (default)" if model.get("default") else "")
    return [name, str(model.get("kind", "-")), human_size(model.get("weight_bytes")),
            str(model.get("draft") or "-"), str(model.get("running", 0)),
            str(model.get("queued", 0)), _unloads(model)]  # fmt: skip


def _unloads(model: dict[str, Any]) -> str:
    """When the model unloads if nothing else comes: pinned, never, in use, or a duration."""
    if model.get("pinned"):
        return "pinned"
    if model.get("ttl_seconds") is None:
        return "never"
    left = model.get("unloads_in_seconds")
    if left is None:
        return "in use"
    minutes, seconds = divmod(int(left), 60)
    return f"in {minutes}m{seconds:02d}s" if minutes else f"in {seconds}s"
