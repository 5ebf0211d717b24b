"""The chat REPL behind `mlxd chat` and `mlxd run MODEL` on a terminal.

One model client for the whole session (cli.model_client: one engine with one loaded model,
or a running `mlxd serve`); each turn sends the whole conversation, so the engine's prefix
cache serves the history and only the new turn is prefilled. Ctrl-C while an answer streams
cancels that request (AnswerStream.cancel) and returns to the prompt.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlxd.chat.chat_request import ChatRequest, Reasoning
from mlxd.chat.images import file_part, image_bytes, read_image
from mlxd.chat.options import ChatOptions
from mlxd.cli.client.model_client import AnswerStream, ModelClient, drain, open_client
from mlxd.cli.render import print_error
from mlxd.cli.repl_input import MessageReader, PipeReader, TerminalReader
from mlxd.cli.repl_options import chat_options_from_args, reasoning_from
from mlxd.cli.stream_render import Answer, Renderer, decode_tps, error_from_finish
from mlxd.config import mlxd_home
from mlxd.errors import InvalidRequest, MlxdError
from mlxd.types import FinishReason

if TYPE_CHECKING:
    from mlxd.store.model_ref import ModelRef

HELP = """\
Type a message and press Enter. Multi-line: start with \"\"\" and end with \"\"\", or press
Esc+Enter (Alt+Enter) for a new line. Ctrl-C stops an answer; Ctrl-C or Ctrl-D at an empty
prompt leaves.
  /clear            start a new conversation (keeps the system prompt)
  /system TEXT      set the system prompt (and start a new conversation); /system alone clears it
  /reasoning on|off show or hide reasoning (off also asks the template not to think)
  /image PATH       attach an image to your next message (vision models); /image alone drops them
  /stats            tokens, speed and prefix-cache hits of the last answer and the session
  /help             this text
  /bye              leave"""


@dataclass(slots=True)
class Conversation:
    """The chat state a turn needs: system prompt, turns so far, display switches, counters."""

    system: str | None = None
    turns: list[dict[str, Any]] = field(default_factory=list)
    show_reasoning: bool = True
    think: bool | None = None  # None: the template's default
    last: Answer | None = None
    answers: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    draft_tokens: int = 0  # speculative decoding: drafts verified, and accepted
    accepted_draft_tokens: int = 0
    images: list[dict[str, Any]] = field(default_factory=list)  # parts for the next message
    reasoning: Reasoning = "auto"  # --reasoning-start/--reasoning-end, else detected

    def messages(self, user_text: str) -> list[dict[str, Any]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + self.turns + [{"role": "user", "content": self.user_content(user_text)}]

    def user_content(self, text: str) -> str | list[dict[str, Any]]:
        """The next user message's content: the attached images (/image), then the text."""
        return [*self.images, {"type": "text", "text": text}] if self.images else text

    def template_kwargs(self) -> dict[str, object] | None:
        return None if self.think is None else {"enable_thinking": self.think}

    def record(self, user_text: str, answer: Answer) -> None:
        reply: dict[str, Any] = {"role": "assistant", "content": answer.content}
        if answer.tool_calls:
            from mlxd.cli.stream_render import tool_call_json

            reply["tool_calls"] = [tool_call_json(c) for c in answer.tool_calls]
        self.turns += [{"role": "user", "content": self.user_content(user_text)}, reply]
        self.images = []  # they stay in the history; the next message has none of its own
        self.last = answer
        if answer.finish:
            usage = answer.finish.usage
            self.answers += 1
            self.prompt_tokens += usage.prompt_tokens
            self.cached_tokens += usage.cached_tokens
            self.completion_tokens += usage.completion_tokens
            self.draft_tokens += answer.finish.timings.draft_tokens
            self.accepted_draft_tokens += answer.finish.timings.accepted_draft_tokens


def run_repl(args: argparse.Namespace, model: ModelRef | str | None) -> int:
    """Open the model named by `model` (a ModelRef, a reference string or None) and chat."""
    if getattr(args, "json", False):
        raise InvalidRequest("--json needs a prompt (an argument or piped stdin)", param="prompt")
    options = chat_options_from_args(args)
    conv = Conversation(
        system=args.system, show_reasoning=not args.hide_reasoning, reasoning=reasoning_from(args)
    )
    if args.no_think:
        conv.think = False
    for path in getattr(args, "image", None) or ():  # `mlxd run MODEL --image X` on a terminal
        conv.images.append(file_part(path))
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    with open_client(args, model) as loaded:
        reader: MessageReader = (
            TerminalReader(mlxd_home() / "chat_history") if interactive else PipeReader(sys.stdin)
        )
        if interactive:
            where = f" on {loaded.server_url}" if loaded.server_url else ""
            print(f"Chatting with {loaded.name}{where}. /help for commands, /bye to leave.")
        Repl(loaded, conv, options, interactive).loop(reader)
    return 0


@dataclass(slots=True)
class Repl:
    loaded: ModelClient
    conv: Conversation
    options: ChatOptions
    interactive: bool

    def loop(self, reader: MessageReader) -> None:
        """Read, answer, repeat; returns at /bye, end of input, or Ctrl-C/Ctrl-D at the prompt."""
        while True:
            text = reader.read()
            if text is None:
                if self.interactive:
                    print("Bye.")
                return
            if not text.strip():
                continue
            if text.startswith("/"):
                if not self.command(text.strip()):
                    return
                continue
            self.answer(text)

    def answer(self, text: str) -> None:
        """One turn. Ctrl-C cancels it; a request error is reported and the chat goes on."""
        answer = Answer(model=self.loaded.name, remote=self.loaded.server_url is not None)
        renderer = Renderer(answer, show_reasoning=self.conv.show_reasoning)
        try:
            request = ChatRequest(
                self.conv.messages(text),
                self.options,
                template_kwargs=self.conv.template_kwargs(),
                reasoning=self.conv.reasoning,
            )
            stream = self.loaded.ask(request)
        except KeyboardInterrupt:  # over HTTP the request itself can wait (a model loading)
            _cancelled()
            return
        except MlxdError as e:  # refused before generation (e.g. too long): keep chatting
            print_error(e)
            if self.conv.images:
                self.conv.images = []  # a refused image must not refuse every next message
                sys.stderr.write("[attached images dropped]\n")
            return
        try:
            renderer.consume(stream)
        except KeyboardInterrupt:
            stream.cancel()
            _drain_uninterrupted(stream)
            _cancelled()
            return
        finish = renderer.answer.finish
        if finish is not None and finish.reason is FinishReason.ERROR:
            print_error(error_from_finish(finish))
            return
        self.conv.record(text, renderer.answer)

    def command(self, line: str) -> bool:
        """Run one slash command; False means leave."""
        name, _, arg = line.partition(" ")
        handler = COMMANDS.get(name)
        if handler is None:
            print(f"unknown command {name}; /help lists the commands")
            return True
        return handler(self, arg.strip())


def _cancelled() -> None:
    sys.stdout.write("\n")
    sys.stderr.write("[answer cancelled]\n")
    sys.stderr.flush()


def _drain_uninterrupted(stream: AnswerStream) -> None:
    """A second Ctrl-C while the cancelled request winds down must not kill the chat."""
    while True:
        try:
            drain(stream)
            return
        except KeyboardInterrupt:
            continue


# ---- slash commands --------------------------------------------------------------------------


def _clear(repl: Repl, arg: str) -> bool:
    repl.conv.turns.clear()
    print("New conversation.")
    return True


def _system(repl: Repl, arg: str) -> bool:
    repl.conv.system = arg or None
    repl.conv.turns.clear()
    print("System prompt set; new conversation." if arg else "System prompt cleared.")
    return True


def _reasoning(repl: Repl, arg: str) -> bool:
    if arg not in ("on", "off"):
        state = "on" if repl.conv.show_reasoning else "off"
        print(f"reasoning is {state}; use /reasoning on|off")
        return True
    repl.conv.show_reasoning = arg == "on"
    repl.conv.think = None if arg == "on" else False
    print(f"Reasoning {arg}.")
    return True


def _image(repl: Repl, arg: str) -> bool:
    if not arg:
        dropped = len(repl.conv.images)
        repl.conv.images = []
        print(f"{dropped} attached image(s) dropped." if dropped else "no image attached")
        return True
    if repl.loaded.takes_images is False:
        print_error(InvalidRequest(f"{repl.loaded.name} takes text only: it cannot read images"))
        return True
    try:
        part = file_part(arg)
        read_image(image_bytes(part), f"image {arg}")  # refuse a bad file now, not next turn
    except MlxdError as e:
        print_error(e)
        return True
    repl.conv.images.append(part)
    count = len(repl.conv.images)
    print(f"Image attached to your next message ({count} image{'' if count == 1 else 's'}).")
    return True


def _stats(repl: Repl, arg: str) -> bool:
    print(stats_text(repl.conv))
    return True


def stats_text(conv: Conversation) -> str:
    """The /stats report: the last answer, then session totals."""
    last = conv.last.finish if conv.last else None
    if last is None:
        return "no answer yet"
    usage, timings = last.usage, last.timings
    return (
        f"last answer: prompt {usage.prompt_tokens} tokens ({usage.cached_tokens} cached), "
        f"completion {usage.completion_tokens} tokens"
        f"{_drafts_text(timings.draft_tokens, timings.accepted_draft_tokens)}, "
        f"first token {timings.ttft_s:.3f} s, "
        f"{decode_tps(last):.1f} tok/s, finish {last.reason.value}\n"
        f"session: {conv.answers} answer{'' if conv.answers == 1 else 's'}, "
        f"prompt {conv.prompt_tokens} tokens "
        f"({conv.cached_tokens} cached), completion {conv.completion_tokens} tokens"
        f"{_drafts_text(conv.draft_tokens, conv.accepted_draft_tokens)}"
    )


def _drafts_text(drafted: int, accepted: int) -> str:
    """The speculation part of /stats, when there was any."""
    return f" ({accepted} of {drafted} draft tokens accepted)" if drafted else ""


def _help(repl: Repl, arg: str) -> bool:
    print(HELP)
    return True


def _bye(repl: Repl, arg: str) -> bool:
    if repl.interactive:
        print("Bye.")
    return False


COMMANDS: dict[str, Callable[[Repl, str], bool]] = {
    "/clear": _clear,
    "/system": _system,
    "/reasoning": _reasoning,
    "/stats": _stats,
    "/image": _image,
    "/help": _help,
    "/bye": _bye,
    "/exit": _bye,
    "/quit": _bye,
}
