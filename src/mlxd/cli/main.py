"""The `mlxd` entry point: parse, dispatch to one command module, render errors.

Each command module in COMMANDS defines `add_parser(subparsers)` and `run(args) -> int`,
and imports anything heavy (mlx, the engine, the server) inside `run`, so `mlxd --help`
and `mlxd list` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, NoReturn, TypeAlias

from mlxd import __version__
from mlxd.errors import MlxdError

if TYPE_CHECKING:
    # What each command module's add_parser receives.
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

# command name -> module under mlxd.cli (one module per command group)
COMMANDS: dict[str, str] = {
    "list": "store_cmds",
    "show": "store_cmds",
    "health": "store_cmds",
    "pull": "hub_cmds",
    "push": "hub_cmds",
    "rm": "store_cmds",
    "import": "import_cmd",
    "convert": "convert_cmd",
    "quantize": "convert_cmd",
    "run": "run",
    "embed": "run",
    "chat": "chat",
    "serve": "serve",
    "ps": "ps",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one stderr line (JSON with --json), exit 2."""

    json_mode = False

    def error(self, message: str) -> NoReturn:
        from mlxd.cli.render import print_error
        from mlxd.errors import InvalidRequest

        error = InvalidRequest(f"{self.prog}: {message} (see `{self.prog} --help`)")
        print_error(error, json_mode=OneLineParser.json_mode)
        sys.exit(2)


class VersionAction(argparse.Action):
    """`mlxd --version`: mlxd's and mlx's versions and which BLAS mlx's CPU matmuls use."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from mlxd.backend import blas

        try:
            mlx_version = version("mlx")
        except PackageNotFoundError:
            mlx_version = "not installed"
        info = blas.active()
        print(f"mlxd {__version__} (mlx {mlx_version}; BLAS: {info.name}, {info.detail})")
        parser.exit()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; given argv naming a command, only that command's module is imported
    (start-up time of `mlxd run` matters, and every module costs a few milliseconds)."""
    parser = OneLineParser(
        prog="mlxd", description="Local LLMs on MLX: a model store, a CLI and an OpenAI server."
    )
    parser.add_argument("--version", action=VersionAction, help="versions and the active BLAS")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    command = next((a for a in argv or [] if not a.startswith("-")), None)
    modules = [COMMANDS[command]] if command in COMMANDS else list(COMMANDS.values())
    seen: set[str] = set()
    for module_name in modules:
        if module_name in seen:
            continue
        seen.add(module_name)
        importlib.import_module(f"mlxd.cli.{module_name}").add_parser(sub)
    return parser


def _options(words: list[str]) -> list[str]:
    return [w for w in words if w.startswith("-") and w != "-"]


def main(argv: list[str] | None = None) -> int:
    # Errors are one line: transformers' own warnings (e.g. "Token indices sequence length is
    # longer than ...", before our clearer context-window error) stay out of stderr.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    argv = sys.argv[1:] if argv is None else argv
    OneLineParser.json_mode = "--json" in argv
    bad = _non_utf8_argument(argv)
    if bad is not None:
        from mlxd.cli.render import print_error

        print_error(bad, json_mode=OneLineParser.json_mode)
        return bad.exit_code
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "words", None), list) and not _options(extra):
        args.words += extra  # prompt words after an option: `run M --image X "question"`
    elif extra:
        parser.parse_args(argv)  # the usual one-line error for what is left over
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    json_mode = bool(getattr(args, "json", False))
    try:
        return int(args.func(args) or 0)
    except MlxdError as e:
        from mlxd.cli.render import print_error

        print_error(e, json_mode=json_mode)
        return e.exit_code
    except UnicodeDecodeError as e:  # stdin or a file read strictly (a UTF-8 locale)
        from mlxd.cli.render import print_error
        from mlxd.cli.utf8 import decode_error

        error = decode_error(e)
        print_error(error, json_mode=json_mode)
        return error.exit_code
    except KeyboardInterrupt:
        from mlxd.cli.render import print_error

        print_error(MlxdError("interrupted"), json_mode=json_mode)
        return 130
    except BrokenPipeError:
        _silence_broken_pipe()
        return 0


def _non_utf8_argument(argv: list[str]) -> MlxdError | None:
    """Arguments are text (prompts, names, flags): one that is not UTF-8 is refused up front."""
    from mlxd.cli.utf8 import check_utf8

    for i, arg in enumerate(argv, 1):
        try:
            check_utf8(arg, f"argument {i}")
        except MlxdError as e:
            return e
    return None


def _silence_broken_pipe() -> None:
    """`mlxd run ... | head -1`: exit quietly instead of a traceback at interpreter exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
