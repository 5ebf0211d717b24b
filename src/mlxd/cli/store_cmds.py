"""`mlxd list`, `show`, `health`, `rm` and `clone`: thin renderers over mlxd.store."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from mlxd.cli.render import human_size, print_error, print_json
from mlxd.errors import InvalidRequest, ModelBroken

if TYPE_CHECKING:
    from mlxd.checkpoint import EmbeddingSpec
    from mlxd.cli.main import Subparsers
    from mlxd.store.inspect import ModelDescription


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("list", help="list models in the HF cache and mlxd's store")
    p.add_argument("pattern", nargs="?", help="substring or glob of model names")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="describe one model")
    p.add_argument("model", help="org/name[@rev], short name, store name or directory")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--files", action="store_true", help="list files and sizes")
    p.add_argument("--config", action="store_true", help="print config.json")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("health", help="check one model, or all; non-zero exit if any is bad")
    p.add_argument("model", nargs="?", help="model to check (default: every model)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--verify",
        action="store_true",
        help="also hash every file against the hub's checksums (reads the whole model)",
    )
    p.set_defaults(func=cmd_health)

    p = sub.add_parser("rm", help="remove a model from the HF cache or mlxd's store")
    p.add_argument("model", help="model to remove")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_rm)

    p = sub.add_parser("clone", help="copy a model into a directory as plain files, to edit")
    p.add_argument("model", help="org/name[@rev] in the HF cache, store name or directory")
    p.add_argument("directory", help="where the copy goes (absent or empty)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_clone)


# ---- list ---------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from mlxd.store.catalog import list_models
    from mlxd.store.facts import vision_label

    entries = list_models(args.pattern)
    if args.json:
        print_json([e.to_dict() for e in entries])
        return 0
    header = ["NAME", "SIZE", "MODIFIED", "KIND", "QUANT", "CONTEXT", "HEALTH"]
    rows = [
        [
            e.id if e.source != "store" else f"{e.id} (store)",
            human_size(e.size),
            _ago(e.modified),
            vision_label(e.kind, e.vision),
            e.quantization,
            str(e.context_window or "-"),
            e.status,
        ]
        for e in entries
    ]
    if not rows:
        print("no models; try `mlxd pull ORG/NAME` or `mlxd import FILE.gguf`", file=sys.stderr)
        return 0
    _table(header, rows)
    return 0


def _ago(ts: float) -> str:
    seconds = max(0.0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"


def _table(header: list[str], rows: list[list[str]]) -> None:
    """A rich table on a terminal; aligned plain text for pipes (stable for scripts)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(box=None, header_style="bold")
        for name in header:
            table.add_column(name, overflow="fold")
        for row in rows:
            style = None if row[-1] == "ok" else "red"
            table.add_row(*row, style=style)
        Console().print(table)
        return
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


# ---- show ---------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    from mlxd.store.inspect import describe

    info = describe(args.model)
    if args.json:
        print_json(info.to_dict(with_files=True, with_config=args.config))
    else:
        _print_description(info, args.files, args.config)
    if not info.runnable:
        error = ModelBroken(f"{info.ref.name}: {info.not_runnable_reason}")
        print_error(error, json_mode=args.json)
        return ModelBroken.exit_code
    return 0


def _kv_line(per_token: dict[str, int] | None) -> str:
    """`full 4.1 KB, 8-bit 1.2 KB, 4-bit 640 B` (serve --kv-bits 8 / 4)."""
    if not per_token:
        return "-"
    return ", ".join(f"{label} {human_size(n)}" for label, n in per_token.items())


def _embedding_line(spec: EmbeddingSpec, dimensions: int | None) -> str:
    """`768 dimensions, mean pooling, normalized` (`ollama show`'s embedding length, and how
    the vector is made)."""
    parts = [f"{dimensions or '?'} dimensions", f"{spec.pooling} pooling"]
    parts.append("normalized" if spec.normalize else "not normalized")
    if spec.layer_norm_cut:
        parts.append("layer norm before a dimensions cut")
    return ", ".join(parts)


def _print_description(info: ModelDescription, files: bool, config: bool) -> None:
    from mlxd.store.facts import vision_label

    q = info.quantization
    quant = (
        f"{q.get('bits')}-bit, group {q.get('group_size')}" if q and "bits" in q else (q or "none")
    )
    params = f"{info.parameters:,}" if info.parameters is not None else "-"
    lines = [
        ("name", info.ref.name),
        ("source", info.ref.source + (f" @ {info.ref.revision}" if info.ref.revision else "")),
        ("path", str(info.ref.path)),
        ("architecture", info.architecture or "-"),
        ("kind", vision_label(info.kind, info.vision)),
        ("parameters", params),
        ("dtype", info.dtype or "-"),
        ("quantization", str(quant)),
        ("context window", str(info.context_window or "-")),
        # an embedding model keeps no KV: what `ollama show` gives instead, its vector length
        ("embedding", _embedding_line(info.embedding, info.dimensions))
        if info.embedding is not None
        else ("kv per token", _kv_line(info.kv_bytes_per_token)),
        ("chat template", "yes" if info.chat_template else "no"),
        ("reasoning", " ".join(info.reasoning_markers) or "none"),
        ("tool calls", info.tool_format or "none"),
        ("eos tokens", " ".join(info.eos_tokens) or "-"),
        ("tokenizer", info.tokenizer.describe()),
        ("size", human_size(info.size)),
        ("health", info.health.status),
        ("runnable", "yes" if info.runnable else f"no: {info.not_runnable_reason}"),
        ("mtp head", info.mtp_head or "none"),
    ]
    if info.vision is not None:
        lines.insert(5, ("images", f"{info.vision.name}: {info.vision.serving}"))
    if info.dflash is not None:
        lines.append(("dflash drafter", info.dflash))
    for key, value in lines:
        print(f"{key:<15} {value}")
    for problem in info.health.problems:
        print(f"  - [{problem.severity.value}] {problem.message}")
    if files:
        print("files:")
        for name, size in info.files:
            print(f"  {human_size(size):>9}  {name}")
    if config:
        import json

        print("config:")
        print(json.dumps(info.config, indent=2))


# ---- health -------------------------------------------------------------------------


def cmd_health(args: argparse.Namespace) -> int:
    from mlxd.store.catalog import list_models
    from mlxd.store.health import check
    from mlxd.store.resolve import resolve

    if args.model:
        ref = resolve(args.model)
        results = [(ref.name, check(ref.path, deep=True, verify=args.verify))]
    else:
        results = [(e.id, check(e.path, deep=True, verify=args.verify)) for e in list_models()]
    bad = [name for name, report in results if not report.ok]
    if args.json:
        print_json([{"name": n, "path": str(r.path)} | r.to_dict() for n, r in results])
    else:
        for name, report in results:
            print(f"{report.status:<10} {name}")
            for problem in report.problems:
                print(f"  - [{problem.severity.value}] {problem.message}")
    if bad:
        msg = f"{len(bad)} of {len(results)} model(s) unhealthy: {', '.join(bad)}"
        print_error(ModelBroken(msg), json_mode=args.json)
        return ModelBroken.exit_code
    return 0


# ---- rm -----------------------------------------------------------------------------


def cmd_rm(args: argparse.Namespace) -> int:
    from mlxd.store.remove import execute, plan_removal

    plan = plan_removal(args.model)
    what = plan.name + (f"@{plan.revision}" if plan.revision else "")
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidRequest(f"refusing to remove {what} without --yes (not a terminal)")
        answer = input(f"Remove {what} ({human_size(plan.size)}, {plan.folder})? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted", file=sys.stderr)
            return 1
    execute(plan)
    if args.json:
        print_json({"removed": plan.to_dict()})
    else:
        print(f"removed {what} ({human_size(plan.size)})")
    return 0


# ---- clone --------------------------------------------------------------------------


def cmd_clone(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mlxd.store.derived import clone_model

    result = clone_model(args.model, Path(args.directory))
    if args.json:
        print_json(result.to_dict())
        return 0
    print(
        f"cloned {result.source} into {result.path}: {result.files} files, "
        f"{human_size(result.bytes)}"
    )
    return 0
