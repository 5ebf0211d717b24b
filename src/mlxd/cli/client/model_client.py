"""What answers `mlxd run` and `mlxd chat`: the seam between them and a model.

`ModelClient` is one Protocol with two implementations: the in-process engine
(in_process.InProcessModel, the default) and a running `mlxd serve` over HTTP
(http_model.HttpModel, with `--server URL` or MLXD_SERVER). Both take the same ChatRequest
(the chat layer's: messages, typed options, tools and tool choice, template kwargs) and
stream the same chat events ending in one FinishEvent, so rendering, `--json` and the REPL
are one code path. This module imports neither: each is imported when chosen.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from mlxd.cli.kv_flags import kv_overrides
from mlxd.config import SETTINGS, setting
from mlxd.errors import InvalidRequest, MlxdError
from mlxd.types import ChatEvent

if TYPE_CHECKING:
    from mlxd.chat.chat_request import ChatRequest
    from mlxd.cli.client.http_model import ServerAddress
    from mlxd.store.model_ref import ModelRef


class AnswerStream(Protocol):
    """One answer: chat events ending in exactly one FinishEvent; cancel() in any state,
    after which iterating gives the rest up to a FinishEvent (CANCELLED unless it ended)."""

    def __iter__(self) -> Iterator[ChatEvent]: ...

    def cancel(self) -> None: ...


class ModelClient(Protocol):
    @property
    def name(self) -> str:
        """The model's name, as the engine or the server calls it."""
        ...

    @property
    def takes_images(self) -> bool | None:
        """Whether the model reads images (None: unknown until a request says so)."""
        ...

    @property
    def server_url(self) -> str | None:
        """The server answering (then timings are measured by this client), or None: the
        in-process engine (timings measured by the engine)."""
        ...

    def ask(self, request: ChatRequest) -> AnswerStream:
        """Start one answer; a request refused before generation raises its MlxdError."""
        ...


def add_client_flags(parser: argparse.ArgumentParser) -> None:
    """--server URL / --local and --api-key (run and chat)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--server",
        metavar="URL",
        help="ask the `mlxd serve` at URL (http://HOST:PORT, /v1 optional) instead of "
        "loading the model here; the model is the server's name for it (default: the "
        f"server's default model) [env {SETTINGS['server'].env}]",
    )
    where.add_argument(
        "--local",
        action="store_true",
        help=f"load the model in this process even when {SETTINGS['server'].env} is set",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"with --server: sent as 'Authorization: Bearer KEY' [env {SETTINGS['api_key'].env}]",
    )


def server_of(args: argparse.Namespace) -> ServerAddress | None:
    """The server to ask (--server, else MLXD_SERVER), or None for the in-process engine.
    Flags only an in-process engine can honour are refused here, before any work."""
    if getattr(args, "local", False):
        return None
    url = getattr(args, "server", None)
    url = setting("server") if url is None else url
    if not url.strip():
        return None
    for flag, dest, owner in SERVER_SIDE_FLAGS:
        if getattr(args, dest, None):
            raise InvalidRequest(
                f"{flag} is the server's choice (mlxd serve {owner}); with --server the "
                "request can only ask for what the server has loaded",
                param=dest,
            )
    from mlxd.cli.client.http_model import server_address

    return server_address(url)


# (flag, argparse dest, the serve flag that decides it instead)
SERVER_SIDE_FLAGS = (
    ("--draft-model", "draft_model", "--draft-model"),
    ("--trust-remote-code", "trust_remote_code", "--trust-remote-code"),
    ("--kv-bits", "kv_bits", "--kv-bits"),
    ("--kv-group-size", "kv_group_size", "--kv-group-size"),
    ("--kv-key-bits", "kv_key_bits", "--kv-key-bits"),
    ("--kv-quant-start", "kv_quant_start", "--kv-quant-start"),
)


def api_key(args: argparse.Namespace) -> str:
    key = getattr(args, "api_key", None)
    return key if key is not None else setting("api_key")


def resolver(args: argparse.Namespace) -> Callable[[str], ModelRef | str]:
    """How a positional is checked for being a model: the local store, or the server's
    model list (GET /v1/models/NAME; the name is then sent as given)."""
    server = server_of(args)
    if server is None:
        from mlxd.cli.client.in_process import resolve_model

        return resolve_model
    from mlxd.cli.client.http_model import HttpModel

    probe = HttpModel(server, "default", api_key(args))

    def known_to_server(name: str) -> str:
        probe.model_card(name)
        return name

    return known_to_server


@contextmanager
def open_client(
    args: argparse.Namespace, model: ModelRef | str | None, *, quiet: bool = False
) -> Iterator[ModelClient]:
    """The client for `model`: the server's (over HTTP) or a freshly loaded in-process
    engine, closed after."""
    server = server_of(args)
    if server is not None:
        from mlxd.cli.client.http_model import HttpModel

        name = model if model is None or isinstance(model, str) else model.name
        yield HttpModel.connect(server, api_key(args), name)
        return
    from mlxd.cli.client.in_process import open_model, resolve_model

    ref = model if model is not None and not isinstance(model, str) else None
    ref = ref or resolve_model(model if isinstance(model, str) else None, quiet=quiet)
    with open_model(
        ref,
        trust_remote_code=args.trust_remote_code,
        draft=args.draft_model,
        overrides=kv_overrides(args),
    ) as loaded:
        yield loaded


def drain(stream: AnswerStream) -> None:
    """After cancel(): read the stream up to its FinishEvent so the request is freed."""
    try:
        for _ in stream:
            pass
    except MlxdError:
        pass
