"""`mlxd serve`: the OpenAI-compatible HTTP server on the one engine.

fastapi/uvicorn and the engine are imported inside `run`, so `mlxd --help` stays fast.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mlxd.cli.kv_flags import add_kv_flags, kv_overrides
from mlxd.cli.repl_options import add_reasoning_flags, reasoning_from
from mlxd.config import ENGINE_DEFAULTS, SETTINGS, default

if TYPE_CHECKING:
    from mlxd.cli.main import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help=f"OpenAI-compatible server ({default('host')}:{default('port')} by default)",
        description="Serve /v1/chat/completions, /v1/completions, /v1/models, /health and "
        "/metrics on the in-process engine.",
    )
    p.add_argument("-m", "--model", help="model to preload and serve as 'default'")
    _add_network_args(p)
    _add_engine_args(p)
    _add_feature_args(p)
    add_reasoning_flags(p)
    p.add_argument("--json", action="store_true", help="errors as one JSON line on stderr")
    p.set_defaults(func=run)


def _add_network_args(p: argparse.ArgumentParser) -> None:
    """Where the server listens and whom it lets in."""
    p.add_argument("--host", help=f"address to bind (default {default('host')}; {_env('host')})")
    p.add_argument(
        "--port", type=int, help=f"port (default {default('port')}, 0 picks one; {_env('port')})"
    )
    p.add_argument(
        "--ollama-port",
        type=int,
        metavar="PORT",
        help="also listen on PORT (Ollama's is 11434), for clients that only know Ollama's "
        f"address; the same server and checks ({_env('ollama_port')})",
    )
    p.add_argument("--api-key", help=f"require 'Authorization: Bearer KEY' ({_env('api_key')})")
    p.add_argument(
        "--no-web",
        action="store_true",
        help=f"no chat page at / (GET / answers JSON; {_env('web')}=0)",
    )
    p.add_argument(
        "--allowed-origins",
        nargs="+",
        metavar="ORIGIN",
        help="origins browsers may call from (CORS for them; any other Origin gets 403; "
        "'*': any; env MLXD_ALLOWED_ORIGINS)",
    )


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    """Engine limits, residency and speculation."""
    p.add_argument("--max-batch", type=int, help="most requests decoding at once")
    p.add_argument("--max-queue", type=int, help="most requests waiting; more get 429")
    p.add_argument(
        "--max-tokens-ceiling", type=int, help="operator ceiling on max_tokens per request"
    )
    p.add_argument(
        "--max-models",
        type=int,
        metavar="N",
        help=f"most models kept loaded (default {default('max_models')}; {_env('max_models')}); "
        "the least recently used idle one unloads first, the --model one never",
    )
    p.add_argument(
        "--model-ttl",
        metavar="DURATION",
        help="unload a model idle this long: seconds or 30s, 5m, 1h "
        f"(default {default('model_ttl_seconds')}: never; {_env('model_ttl_seconds')})",
    )
    add_kv_flags(p)
    p.add_argument(
        "--draft-model",
        metavar="REF",
        help="a smaller model with the same tokenizer, loaded with --model, that drafts tokens "
        "for speculative decoding, or a DFlash drafter made for --model (resolved like "
        "--model)",
    )
    p.add_argument(
        "--draft-kind",
        choices=("none", "ngram", "model", "mtp", "dflash"),
        help="speculative decoding for requests that do not choose (request field: "
        "draft_kind, which may turn it off): ngram = prompt lookup, model = the draft model, "
        "mtp = the checkpoint's MTP head, dflash = a DFlash drafter given as --draft-model "
        "(default: model or dflash with --draft-model, as it is, else none)",
    )
    p.add_argument(
        "--num-draft-tokens",
        type=int,
        metavar="K",
        help=f"most draft tokens verified per step, 1-16 (default "
        f"{ENGINE_DEFAULTS['num_draft_tokens']}; request field: num_draft_tokens)",
    )


def _add_feature_args(p: argparse.ArgumentParser) -> None:
    """Caches on disk, shutdown, trust, images and distributed sharding."""
    p.add_argument(
        "--prefix-cache-dir",
        metavar="DIR",
        help="also keep prefix cache snapshots as files in DIR, so a restarted server reuses "
        f"them (bounded by {_env('prefix_cache_disk_bytes')}; {_env('prefix_cache_dir')})",
    )
    p.add_argument("--drain-seconds", type=float, help="shutdown: seconds to finish")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow models that ship code (never executed otherwise)",
    )
    p.add_argument(
        "--allow-image-urls",
        action="store_true",
        help="fetch http(s) image URLs in chat requests (default: only inline data: URLs; "
        f"{_env('allow_image_urls')}=1)",
    )
    p.add_argument(
        "--alias",
        action="append",
        metavar="NAME=MODEL",
        help="serve requests for NAME with MODEL (a store name or 'default'); NAME may be a "
        "glob, e.g. --alias 'claude-*=default' for Anthropic clients; repeatable, the first "
        "match wins",
    )
    p.add_argument(
        "--shard",
        choices=("auto", "tensor", "pipeline"),
        default="auto",
        help="under mlx.launch: how the model is split across ranks (auto: tensor parallel "
        "where the architecture supports it, else pipeline; docs/usage/distributed.md)",
    )


def _markers(reasoning: object) -> tuple[str, str] | None:
    return reasoning if isinstance(reasoning, tuple) else None


def _env(name: str) -> str:
    return f"env {SETTINGS[name].env}"


def run(args: argparse.Namespace) -> int:
    from mlxd.server.launch import serve
    from mlxd.server.served_models import parse_aliases
    from mlxd.server.settings import ServerSettings

    settings = ServerSettings.from_config(
        host=args.host,
        port=args.port,
        ollama_port=args.ollama_port,
        api_key=args.api_key,
        allowed_origins=_origins(args.allowed_origins),
        drain_seconds=args.drain_seconds,
        trust_remote_code=args.trust_remote_code or None,
        allow_image_urls=args.allow_image_urls or None,
        aliases=parse_aliases(args.alias or ()) or None,
        web=False if args.no_web else None,
        reasoning=_markers(reasoning_from(args)),
    )
    overrides: dict[str, Any] = {"trust_remote_code": args.trust_remote_code}
    for name in ("max_batch", "max_queue", "max_tokens_ceiling", "max_models"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    overrides.update(kv_overrides(args))
    if args.draft_kind is not None:
        from mlxd.types import DraftKind

        overrides["draft_kind"] = DraftKind(args.draft_kind)
    if args.num_draft_tokens is not None:
        overrides["num_draft_tokens"] = args.num_draft_tokens
    if args.model_ttl is not None:
        overrides["model_ttl_seconds"] = _duration(args.model_ttl)
    if args.prefix_cache_dir is not None:
        overrides["prefix_cache_dir"] = args.prefix_cache_dir
    return serve(settings, args.model, overrides, args.shard, args.draft_model)


def _origins(values: list[str] | None) -> tuple[str, ...] | None:
    from mlxd.server.origin import parse_origins

    return parse_origins(",".join(values)) if values else None


def _duration(text: str) -> float:
    from mlxd.engine.engine_config import parse_duration
    from mlxd.errors import InvalidRequest

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise InvalidRequest(f"--model-ttl: {exc}", param="model_ttl") from None
