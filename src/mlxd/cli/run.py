"""`mlxd run [MODEL] [PROMPT|-] [WORDS...]`: one answer from the in-process engine, or from
a running `mlxd serve` with --server URL (or MLXD_SERVER).

Which positional is the model: with `-m MODEL` every positional is prompt text. Otherwise
the first positional names the model when the store resolves it (with --server: when the
server lists it); a first positional that contains whitespace, or is `-`, or is the only
positional and names no known model, starts the prompt and the default model answers (the
embedded one, or the server's). `-` (or no prompt with piped stdin) reads the prompt from
stdin; further words are appended after a blank line. No prompt on a terminal opens the
chat REPL.

With --server URL (or MLXD_SERVER) the request goes to a running `mlxd serve` over HTTP and
prints the same output from a model that is already loaded (no load, no mlx import here).
The model is the server's name for it; --draft-model and --trust-remote-code are the
server's choices (refused here); --image files are sent as data: URLs. --json timings are
then the client's: ttft_s and total_s from sending the request, queued_s and the draft
counts null.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from mlxd.chat.chat_request import ChatRequest
from mlxd.cli.client.model_client import add_client_flags, drain, open_client, resolver
from mlxd.cli.repl_options import (
    add_generation_flags,
    chat_options_from_args,
    reasoning_from,
    template_kwargs_from,
    tool_choice_from,
)
from mlxd.cli.utf8 import check_utf8
from mlxd.errors import AmbiguousModel, InvalidRequest, ModelNotFound

if TYPE_CHECKING:
    from collections.abc import Callable

    from mlxd.cli.client.model_client import ModelClient
    from mlxd.cli.main import Subparsers
    from mlxd.cli.stream_render import Answer
    from mlxd.store.model_ref import ModelRef


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        usage="mlxd run [MODEL] [PROMPT|-] [WORDS ...] [options]",
        help="answer one prompt (streamed), or open a chat when no prompt is given",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "words", nargs="*", metavar="MODEL PROMPT", help="model (optional) and prompt words"
    )
    parser.add_argument("-m", "--model", help="the model (then every positional is the prompt)")
    parser.add_argument(
        "--no-stream", action="store_true", help="print the answer once, at the end"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: model, content, reasoning, tool_calls, finish_reason, "
        "usage, timings (errors: one JSON object on stderr)",
    )
    parser.add_argument(
        "--tools",
        metavar="JSON|FILE",
        help="OpenAI tool definitions (a JSON list, inline or in a file) [request field: tools]",
    )
    parser.add_argument(
        "--tool-choice",
        metavar="none|auto|required|NAME",
        help="what the model may do with --tools: none, auto (the default: call one or "
        "answer), required (call one), or the name of the one to call [request field: "
        "tool_choice]",
    )
    parser.add_argument(
        "--image",
        action="append",
        metavar="PATH",
        help="an image for a vision model (PNG, JPEG, WebP, GIF, BMP); repeat for several "
        "[request field: an image_url content part]",
    )
    add_generation_flags(parser)
    add_client_flags(parser)
    parser.set_defaults(func=run)
    _add_embed_parser(subparsers)


def _add_embed_parser(subparsers: Subparsers) -> None:
    """`mlxd embed MODEL TEXT...`: one vector per text from an embedding model, in process,
    through the same path as the server's /v1/embeddings (chat.embedding)."""
    parser = subparsers.add_parser(
        "embed",
        help="embed texts with an embedding model (one JSON vector per line)",
        description="One vector per TEXT from an embedding model (bge, e5, gte, nomic, "
        "Qwen3-Embedding...), loaded here or, with --server URL, asked of a running `mlxd "
        "serve` (POST /v1/embeddings). `-` (or no TEXT with piped stdin) embeds stdin. "
        "Prints each vector as a JSON array on its own line; --json prints one object.",
    )
    parser.add_argument("model", help="the embedding model (store name, repo or directory)")
    parser.add_argument("text", nargs="*", help="texts to embed, one vector each")
    parser.add_argument(
        "--dimensions", type=int, metavar="N", help="keep the first N dimensions (rescaled)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: model, dimensions, prompt_tokens, embeddings",
    )
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="allow code shipped with the model"
    )
    add_client_flags(parser)
    parser.set_defaults(func=embed)


def embed(args: argparse.Namespace) -> int:
    import json

    texts = list(args.text)
    if texts in ([], ["-"]):
        if not texts and sys.stdin.isatty():
            raise InvalidRequest("mlxd embed: give TEXT arguments, or `-` to read stdin")
        texts = [check_utf8(sys.stdin.read(), "stdin").rstrip("\n")]
    vectors, tokens, name = _embedded(args, texts)
    if args.json:
        body = {"model": name, "dimensions": len(vectors[0]), "prompt_tokens": tokens}
        _print_json_line({**body, "embeddings": vectors})
        return 0
    for vector in vectors:
        sys.stdout.write(json.dumps(vector) + "\n")
    return 0


@dataclass(frozen=True, slots=True)
class Invocation:
    """What the positionals mean: model reference (None: default), prompt (None: read stdin
    or open the REPL), and whether stdin was asked for explicitly with `-`."""

    model: str | None
    prompt_words: tuple[str, ...]
    # The resolved model when resolving was part of parsing: a ModelRef in-process, the name
    # the server knows with --server.
    model_ref: ModelRef | str | None = None

    @property
    def wants_stdin(self) -> bool:
        return bool(self.prompt_words) and self.prompt_words[0] == "-"


def parse_positionals(
    words: list[str],
    model: str | None,
    resolve: Callable[[str], ModelRef | str] | None = None,
) -> Invocation:
    """Apply the rule in the module docstring; resolves through `resolve` (default: the
    store) when it must."""
    if model is not None or not words:
        return Invocation(model, tuple(words))
    first = words[0]
    if first == "-" or _has_space(first):
        return Invocation(None, tuple(words))
    if resolve is None:
        from mlxd.cli.client.in_process import resolve_model

        resolve = resolve_model

    try:
        ref = resolve(first)
    except AmbiguousModel:  # a ModelNotFound too, but never a prompt: list the candidates
        raise
    except ModelNotFound as e:
        if len(words) == 1 and not _looks_like_reference(first):
            return Invocation(None, tuple(words))
        raise ModelNotFound(
            f"{e.message} (to ask the default model, quote the whole prompt as one argument)",
            param="model",
        ) from None
    return Invocation(first, tuple(words[1:]), model_ref=ref)


def _has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


def _looks_like_reference(text: str) -> bool:
    """A path or an `org/name[@rev]`: a typo there is an error, not a prompt."""
    return text.startswith((".", "/", "~")) or "/" in text or "@" in text


def read_prompt(inv: Invocation, stdin: IO[str]) -> str | None:
    """The prompt text, or None when the REPL should open (no prompt, stdin is a terminal)."""
    words = list(inv.prompt_words)
    piped = not stdin.isatty()
    if inv.wants_stdin or (not words and piped):
        head = check_utf8(stdin.read(), "stdin")
        rest = " ".join(words[1:] if inv.wants_stdin else words)
        text = head.rstrip("\n") + ("\n\n" + rest if rest else "")
    elif words:
        text = " ".join(words)
    else:
        return None
    if not text.strip():
        raise InvalidRequest("the prompt is empty", param="prompt")
    return text


def messages_for(
    prompt: str, system: str | None, images: list[str] | None = None
) -> list[dict[str, Any]]:
    """The request's messages: the system prompt, then the user turn (its images first, as
    the server receives them from an OpenAI client: image_url parts with data: URLs)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": user_content(prompt, images)}]


def user_content(text: str, images: list[str] | None) -> str | list[dict[str, Any]]:
    """A user message's content: the text, or image parts (files read now) then the text."""
    if not images:
        return text
    from mlxd.chat.images import file_part

    return [*(file_part(path) for path in images), {"type": "text", "text": text}]


def run(args: argparse.Namespace) -> int:
    options = chat_options_from_args(args)
    tools = load_tools(args.tools)
    tool_choice = tool_choice_from(args.tool_choice)
    tool_choice.forced(tools)  # a choice the tools cannot meet fails now, before loading
    inv = parse_positionals(list(args.words), args.model, resolver(args))
    prompt = read_prompt(inv, sys.stdin)
    if prompt is None:
        from mlxd.cli.repl import run_repl

        return run_repl(args, inv.model_ref or inv.model)
    request = ChatRequest(
        messages_for(prompt, args.system, args.image),  # image files: read before loading
        options,
        tools=tools,
        tool_choice=tool_choice,
        template_kwargs=template_kwargs_from(args.no_think),
        reasoning=reasoning_from(args),
    )
    with open_client(args, inv.model_ref or inv.model, quiet=args.json) as client:
        answer = ask_once(client, request, args)
    if args.json:
        _print_json_line(answer.to_json())
    return 0


def ask_once(client: ModelClient, request: ChatRequest, args: argparse.Namespace) -> Answer:
    """Stream one answer to the terminal (or collect it for --json); raise its error if any."""
    from mlxd.cli.stream_render import Answer, Renderer, check_finish

    renderer = Renderer(
        Answer(model=client.name, remote=client.server_url is not None),
        stream=not args.no_stream and not args.json,
        quiet=args.json,
        show_reasoning=not args.hide_reasoning,
    )
    stream = client.ask(request)
    try:
        renderer.consume(stream)
    except BaseException:
        # Ctrl-C, a closed pipe or an error: stop generating (in-process: before the engine
        # closes; over HTTP: the closed connection cancels the server's request).
        stream.cancel()
        drain(stream)
        raise
    check_finish(renderer.answer)
    return renderer.answer


def _embedded(args: argparse.Namespace, texts: list[str]) -> tuple[list[list[float]], int, str]:
    """(vectors, tokens embedded, model name) from the server (--server) or in process."""
    from mlxd.cli.client.model_client import api_key, server_of

    server = server_of(args)
    if server is not None:
        from mlxd.cli.client.http_model import HttpModel

        vectors, tokens = HttpModel(server, args.model, api_key(args)).embed(texts, args.dimensions)
        return vectors, tokens, args.model
    from mlxd.chat.embedding import EmbedInput, start_embedding
    from mlxd.cli.client.in_process import open_model
    from mlxd.store.runnable import resolve_or_default

    ref = resolve_or_default(args.model)
    with open_model(ref, trust_remote_code=args.trust_remote_code) as model:
        result = start_embedding(model.engine, model.info, EmbedInput(texts, args.dimensions))
        done = result.result()
    return done.vectors, done.prompt_tokens, ref.name


def load_tools(value: str | None) -> list[dict[str, Any]] | None:
    """--tools: inline JSON (starts with `[`) or a file holding it; checked by the chat layer."""
    if value is None:
        return None
    import json
    from pathlib import Path

    text = value
    if not value.lstrip().startswith(("[", "{")):
        try:
            text = Path(value).expanduser().read_text()
        except OSError as e:
            raise InvalidRequest(
                f"--tools: cannot read {value}: {e.strerror}", param="tools"
            ) from None
    try:
        tools = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"--tools: invalid JSON ({e.msg})", param="tools") from None
    from mlxd.chat.messages import normalize_tools

    return normalize_tools(tools)


def _print_json_line(obj: dict[str, Any]) -> None:
    import json

    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()
