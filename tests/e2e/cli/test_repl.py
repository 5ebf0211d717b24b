"""The chat REPL through a pseudo-terminal: Ctrl-C mid-answer, /clear, /stats with prefix
cache hits, multi-line input, EOF; and piped stdin."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import MLXD
from tests.e2e.cli.pty_session import PtySession

PROMPT = r">>>"


@pytest.fixture
def chat(cli_env: dict[str, str]) -> Iterator:
    sessions: list[PtySession] = []

    def start(*args: str, command: str = "chat") -> PtySession:
        env = cli_env | {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
        session = PtySession([*MLXD[1:], command, *args], env)
        sessions.append(session)
        session.expect(r"Chatting with .*/help")
        session.expect(PROMPT)
        return session

    yield start
    for session in sessions:
        session.close()


def command(session: PtySession, line: str, reply: str) -> re.Match[str]:
    """Type a line at the prompt, wait for `reply`, then for the next prompt (typing before
    the prompt is back would hit the terminal in cooked mode)."""
    session.send(line + "\r")
    match = session.expect(reply)
    session.expect(PROMPT)
    return match


def stats(session: PtySession) -> re.Match[str]:
    return command(
        session,
        "/stats",
        r"last answer: prompt (\d+) tokens \((\d+) cached\).*\n"
        r"session: (\d+) answers?, prompt (\d+) tokens",
    )


def test_ctrl_c_cancels_the_answer_and_keeps_the_model(chat, long_chat_model: Path) -> None:
    """^C typed on the terminal mid-answer (the tty driver turns it into SIGINT) stops that
    answer only: the next question gets a whole answer, and the chat goes on."""
    session = chat(str(long_chat_model), "--ignore-eos", "--max-tokens", "1000")
    session.send("Tell me everything\r")
    session.expect(r"Tell me everything\n.+")  # the answer started streaming (~4 s in all)
    session.send("\x03")
    session.expect(r"\[answer cancelled\]")
    session.expect(PROMPT)
    assert session.alive()
    command(session, "/stats", "no answer yet")  # the cancelled turn was dropped
    command(session, "Tell me more", r"Tell me more\n.+")
    assert "[answer cancelled]" not in session.text[session.text.index("Tell me more") :]
    last = stats(session)
    assert int(last.group(3)) == 1  # the second answer, whole
    session.send("\x04")  # Ctrl-D at an empty prompt
    session.expect("Bye")
    assert session.wait() == 0


def test_turns_stats_clear_and_multiline(
    chat, tiny_chat_model: Path, cli_env: dict[str, str]
) -> None:
    session = chat(str(tiny_chat_model), "--max-tokens", "4")
    command(session, "Hello there", r"Hello there\n")
    first = stats(session)
    command(session, "And then?", r"And then\?\n")
    second = stats(session)
    assert int(second.group(3)) == 2
    assert int(second.group(1)) > int(first.group(1))  # the history is in the prompt
    assert int(second.group(2)) > 0  # ... and came from the prefix cache

    command(session, "/clear", "New conversation")
    for line in ('"""', "line one", "line two"):
        session.send(line + "\r")
        session.expect(r"\.\.\.")
    command(session, '"""', r"\n")
    fenced = stats(session)
    assert int(fenced.group(3)) == 3  # three lines, one message
    assert int(fenced.group(1)) < int(second.group(1))  # /clear dropped the history

    command(session, "first\x1b\rsecond", r"second\n")  # Esc+Enter: a new line, one message
    assert int(stats(session).group(3)) == 4
    session.send("\x03")  # Ctrl-C at an empty prompt leaves
    session.expect("Bye")
    assert session.wait() == 0
    history = Path(cli_env["MLXD_HOME"]) / "chat_history"
    assert "Hello there" in history.read_text()  # kept for the next session


def test_run_without_prompt_on_a_terminal_chats(chat, tiny_chat_model: Path) -> None:
    session = chat(str(tiny_chat_model), "--max-tokens", "2", command="run")
    command(session, "/help", r"/reasoning on\|off")
    command(session, "/system Be brief.", "System prompt set")
    command(session, "/reasoning off", "Reasoning off")
    command(session, "/nonsense", "unknown command /nonsense")
    session.send("/bye\r")
    session.expect("Bye")
    assert session.wait() == 0


def test_piped_chat_ends_at_end_of_input(tiny_chat_model: Path, cli_env: dict[str, str]) -> None:
    too_long = "Paris " * 3000  # more tokens than the 2048-token window
    proc = subprocess.run(
        [*MLXD, "chat", str(tiny_chat_model), "--max-tokens", "3"],
        input=f'hello\n{too_long}\n"""\ntwo\nlines\n"""\n/stats\n',
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "session: 2 answers" in proc.stdout  # the refused turn did not end the chat
    assert ">>>" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mlxd: error:")]
    assert len(errors) == 1 and "context" in errors[0].lower(), proc.stderr
