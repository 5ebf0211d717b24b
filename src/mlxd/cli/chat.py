"""`mlxd chat [MODEL]`: an interactive chat on the in-process engine, or on a running
`mlxd serve` with --server URL (or MLXD_SERVER); see cli/repl.py.

On a terminal: a prompt_toolkit REPL with history, multi-line input and slash commands.
With piped stdin: one message per line (or per triple-quote fence), answers on stdout, and
the end of input ends the chat with exit code 0.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mlxd.cli.client.model_client import add_client_flags
from mlxd.cli.repl_options import add_generation_flags

if TYPE_CHECKING:
    from mlxd.cli.main import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "chat",
        help="chat with a model in the terminal",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "model",
        nargs="?",
        default=None,
        help="model reference (default: the embedded model; with --server, the server's)",
    )
    add_generation_flags(parser)
    add_client_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mlxd.cli.repl import run_repl

    return run_repl(args, args.model)
