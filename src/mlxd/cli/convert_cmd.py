"""`mlxd convert SRC` (and `mlxd quantize SRC`, the same command quantizing at 4 bits unless
told otherwise): a Hugging Face checkpoint to an MLX checkpoint in mlxd's store."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mlxd.backend.hf_convert import AFFINE_BITS, DTYPES, MODES, QUANTIZE_CHOICES, RECIPES
from mlxd.cli.render import ProgressBar, human_size, print_json

if TYPE_CHECKING:
    from mlxd.cli.main import Subparsers


def add_parser(sub: Subparsers) -> None:
    _add_command(sub, "convert", None)
    _add_command(sub, "quantize", "4")


def _add_command(sub: Subparsers, command: str, default: str | None) -> None:
    p = sub.add_parser(
        command,
        help="convert a Hugging Face checkpoint into an MLX one in mlxd's store"
        + (" (4-bit unless --quantize says otherwise)" if default else ""),
        description="Convert a local Hugging Face checkpoint (a directory, a cached repo or a "
        "store entry) with mlx-lm's converter; the result is health-checked before it is "
        "named, and an interrupted convert leaves nothing in the store.",
    )
    p.add_argument("source", help="directory, org/name[@rev] in the HF cache, or store name")
    p.add_argument(
        "--quantize",
        "-q",
        choices=QUANTIZE_CHOICES,
        default=default,
        metavar="BITS|MODE|RECIPE",
        help=f"affine bits ({','.join(AFFINE_BITS)}), a mode ({', '.join(MODES)}) or a mixed "
        f"recipe ({', '.join(RECIPES)})" + ("; default 4" if default else ""),
    )
    p.add_argument(
        "--group-size",
        type=int,
        choices=(16, 32, 64, 128),
        help="quantization group size (default: the mode's; 64 for affine)",
    )
    p.add_argument(
        "--dtype", choices=DTYPES, help="unquantized weights' dtype (default: torch_dtype)"
    )
    p.add_argument("--name", help="store name (default: the source's name + -4bit, ...)")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow a checkpoint that ships Python code (as for loading)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing entry")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_convert)


def cmd_convert(args: argparse.Namespace) -> int:
    from mlxd.backend.hf_convert import ConvertPlan
    from mlxd.store.derived import convert_model

    plan = ConvertPlan(args.quantize, args.group_size, args.dtype, args.trust_remote_code)
    with ProgressBar("converting", sys.stderr.isatty() and not args.json) as bar:
        result = convert_model(args.source, plan, args.name, replace=args.force, stage=bar.stage)
    if args.json:
        print_json(result.to_dict())
        return 0
    what = f"quantized ({result.quantize})" if result.quantize else result.dtype or "float"
    print(
        f"converted {result.source} as {result.name}: {what}, {human_size(result.bytes)} "
        f"in {result.seconds:.1f}s -> {result.path}"
    )
    return 0
