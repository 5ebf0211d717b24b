"""--kv-bits, --kv-group-size, --kv-key-bits and --kv-quant-start: the KV cache's precision,
for `serve` and for the in-process engine of `run` / `chat` (one engine setting each, `mlxd.config`
SETTINGS kv_bits, kv_group_size, kv_key_bits and kv_quant_start; never per request)."""

from __future__ import annotations

import argparse

from mlxd.config import KV_BITS, KV_GROUP_SIZES, KV_KEY_BITS, SETTINGS, default

KV_FLAGS = (
    "kv_bits",
    "kv_group_size",
    "kv_key_bits",
    "kv_quant_start",
)  # argparse dests, named as the engine settings


def add_kv_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kv-bits",
        type=int,
        choices=(0, *KV_BITS),
        help=f"store attention keys and values quantized to this many bits (default "
        f"{default('kv_bits')}: full precision; env {SETTINGS['kv_bits'].env}); 8 holds about "
        "1.9x the tokens in the same memory",
    )
    parser.add_argument(
        "--kv-group-size",
        type=int,
        choices=KV_GROUP_SIZES,
        help=f"with --kv-bits: values per quantization group (default "
        f"{default('kv_group_size')}; env {SETTINGS['kv_group_size'].env})",
    )
    parser.add_argument(
        "--kv-key-bits",
        type=int,
        choices=(0, *KV_KEY_BITS),
        help="with --kv-bits: the keys' own precision; 16 keeps them at 16-bit levels, about exact "
        "(closest to full-precision output: 8-bit values with 16-bit keys hold about 2.5x the "
        f"tokens of float32 KV, 1.3x of 16-bit; default {default('kv_key_bits')}: as --kv-bits; "
        f"env {SETTINGS['kv_key_bits'].env})",
    )
    parser.add_argument(
        "--kv-quant-start",
        type=int,
        metavar="N",
        help=f"with --kv-bits: each conversation's most recent N tokens also stay in full "
        f"precision (closer to unquantized output, N tokens' full-precision bytes more each; "
        f"default {default('kv_quant_start')}; env {SETTINGS['kv_quant_start'].env})",
    )


def kv_overrides(args: argparse.Namespace) -> dict[str, int]:
    """The engine settings the flags given override."""
    return {name: getattr(args, name) for name in KV_FLAGS if getattr(args, name, None) is not None}
