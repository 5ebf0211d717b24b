"""`mlxd import FILE.gguf`: convert a llama GGUF file into an MLX checkpoint in the store."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mlxd.cli.render import ProgressBar, human_size, print_json

if TYPE_CHECKING:
    from mlxd.cli.main import Subparsers

DTYPE_CHOICES = ("float32", "float16", "bfloat16")


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "import",
        help="import a GGUF file (llama) into mlxd's store",
        description="Convert a llama GGUF file (F32/F16/BF16, Q4_0/Q4_1/Q5_x/Q8_0, K-quants) "
        "into an MLX checkpoint: dequantized weights, config.json and a rebuilt tokenizer.",
    )
    p.add_argument("file", help="path of the .gguf file")
    p.add_argument("--name", help="store name (default: the GGUF's general.name, slugified)")
    p.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="float32",
        help="weight dtype (default float32: fastest on CPU; float16/bfloat16 halve the size)",
    )
    p.add_argument(
        "--keep-quantized",
        action="store_true",
        help="keep Q4_0/Q4_1/Q8_0 weights quantized as MLX affine (exact, 4-8x smaller; "
        "fast on Apple GPUs, slow on CPUs)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing entry of that name")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mlxd.store.gguf.importer import import_gguf

    show_bar = sys.stderr.isatty() and not args.json
    with ProgressBar("importing", show_bar) as bar:
        result = import_gguf(
            Path(args.file),
            args.name,
            dtype=args.dtype,
            replace=args.force,
            keep_quantized=args.keep_quantized,
            progress=bar.update if bar.enabled else None,
        )
    if args.json:
        print_json(result.to_dict())
        return 0
    for warning in result.warnings:
        sys.stderr.write(f"mlxd: warning: {warning}\n")
    print(
        f"imported {result.source.name} as {result.name}: {result.parameters / 1e6:.1f}M "
        f"parameters, {'quantized + ' if result.quantized else ''}{result.dtype}, "
        f"{human_size(result.bytes)} in {result.seconds:.1f}s -> {result.path}"
    )
    return 0
