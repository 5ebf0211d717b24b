"""Where the chat REPL's messages come from: a prompt_toolkit line editor on a terminal
(persistent history, Esc+Enter / Alt+Enter for a new line, Ctrl-C clears the line), or plain
lines from a pipe. Both understand triple-quote fences for multi-line messages.

A reader returns the next message, or None when the user is done (EOF, Ctrl-D, or Ctrl-C at
an empty prompt).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from mlxd.cli.utf8 import check_utf8

if TYPE_CHECKING:  # prompt_toolkit loads only for a terminal chat
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

FENCE = '"""'
PROMPT, CONTINUATION = ">>> ", "... "

LineReader = Callable[[str], "str | None"]


class MessageReader(Protocol):
    def read(self) -> str | None: ...


def read_message(read_line: LineReader) -> str | None:
    """One message: a line, or every line between a `\"\"\"` fence and the closing `\"\"\"`.

    None means the input ended before a message started. End of input inside a fence sends
    what was typed so far.
    """
    first = read_line(PROMPT)
    if first is None:
        return None
    stripped = first.strip()
    if not stripped.startswith(FENCE):
        return first
    body = stripped[len(FENCE) :]
    if body.endswith(FENCE) and body:
        return body[: -len(FENCE)]
    lines = [body] if body else []
    while (line := read_line(CONTINUATION)) is not None:
        if line.rstrip().endswith(FENCE):
            lines.append(line.rstrip()[: -len(FENCE)])
            break
        lines.append(line)
    return "\n".join(lines).strip("\n")


class PipeReader:
    """Lines from a non-terminal stdin; end of input ends the chat."""

    def __init__(self, stream: TextIO, echo_prompt: bool = False) -> None:
        self._stream = stream
        self._echo = echo_prompt

    def _line(self, prompt: str) -> str | None:
        if self._echo:
            print(prompt, end="", flush=True)
        line = check_utf8(self._stream.readline(), "stdin")
        return None if line == "" else line.rstrip("\n")

    def read(self) -> str | None:
        return read_message(self._line)


class TerminalReader:
    """prompt_toolkit line editor with a history file under mlxd's home."""

    def __init__(self, history_path: Path) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory

        history_path.parent.mkdir(parents=True, exist_ok=True)
        self._session: PromptSession[str] = PromptSession(
            history=FileHistory(str(history_path)), key_bindings=_key_bindings()
        )

    def _line(self, prompt: str) -> str | None:
        try:
            return self._session.prompt(prompt)
        except EOFError:
            return None
        except KeyboardInterrupt:
            if prompt == PROMPT:
                return None
            raise  # inside a fence: abandon the message, see read()

    def read(self) -> str | None:
        try:
            return read_message(self._line)
        except KeyboardInterrupt:
            return ""


def _key_bindings() -> KeyBindings:
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        """Esc+Enter (Alt+Enter on most terminals) starts a new line in the message."""
        event.current_buffer.insert_text("\n")

    @bindings.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        """Ctrl-C clears a line being typed; at an empty prompt it ends the chat."""
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

    return bindings
