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

PROMPT = r">>> "


@pytest.fixture
def chat(cli_env: dict[str, str]) -> Iterator:
    sessions: list[PtySession] = []

    def start(*args: str) -> PtySession:
        env = cli_env | {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
        session = PtySession([*MLXD[1:], "chat", *args], env)
        sessions.append(session)
        session.expect(r"Chatting with .*/help")
        session.expect(PROMPT)
        return session

    yield start
    for session in sessions:
        session.close()


def stats(session: PtySession) -> re.Match[str]:
    session.send("/stats\r")
    return session.expect(
        r"last answer: prompt (\d+) tokens \((\d+) cached\).*\n"
        r"session: (\d+) answers, prompt (\d+) tokens"
    )


def test_ctrl_c_cancels_the_answer_and_keeps_the_model(chat, long_chat_model: Path) -> None:
    session = chat(str(long_chat_model), "--ignore-eos", "--max-tokens", "60000")
    session.send("Tell me everything\r")
    session.expect(r"Tell me everything\n.+")  # the answer started streaming
    session.interrupt()
    session.expect(r"\[answer cancelled\]")
    session.expect(PROMPT)
    assert session.alive()
    session.send("/stats\r")
    session.expect("no answer yet")  # the cancelled turn is not part of the conversation
    session.send("\x04")  # Ctrl-D at an empty prompt
    session.expect("Bye")
    assert session.wait() == 0


def test_turns_stats_clear_and_multiline(chat, tiny_chat_model: Path) -> None:
    session = chat(str(tiny_chat_model), "--max-tokens", "4")
    session.send("Hello there\r")
    session.expect(PROMPT)
    first = stats(session)
    session.expect(PROMPT)
    session.send("And then?\r")
    session.expect(PROMPT)
    second = stats(session)
    session.expect(PROMPT)
    assert int(second.group(3)) == 2
    assert int(second.group(1)) > int(first.group(1))  # the history is in the prompt
    assert int(second.group(2)) > 0  # ... and came from the prefix cache

    session.send("/clear\r")
    session.expect("New conversation")
    session.send('"""\r')
    session.expect(r"\.\.\. ")
    session.send("line one\r")
    session.send("line two\r")
    session.send('"""\r')
    session.expect(PROMPT)
    fenced = stats(session)
    assert int(fenced.group(3)) == 3  # three lines, one message
    assert int(fenced.group(1)) < int(second.group(1))  # /clear dropped the history

    session.send("first\x1b\rsecond\r")  # Esc+Enter: a new line inside one message
    session.expect(PROMPT)
    assert int(stats(session).group(3)) == 4
    session.send("\x03")  # Ctrl-C at an empty prompt leaves
    session.expect("Bye")
    assert session.wait() == 0


def test_slash_commands(chat, tiny_chat_model: Path) -> None:
    session = chat(str(tiny_chat_model), "--max-tokens", "2")
    session.send("/help\r")
    session.expect("/reasoning on\\|off")
    session.send("/system Be brief.\r")
    session.expect("System prompt set")
    session.send("/reasoning off\r")
    session.expect("Reasoning off")
    session.send("/nonsense\r")
    session.expect("unknown command /nonsense")
    session.send("/bye\r")
    assert session.wait() == 0


def test_piped_chat_ends_at_end_of_input(tiny_chat_model: Path, cli_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*MLXD, "chat", str(tiny_chat_model), "--max-tokens", "3"],
        input='hello\n"""\ntwo\nlines\n"""\n/stats\n',
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "session: 2 answers" in proc.stdout
    assert ">>>" not in proc.stdout
