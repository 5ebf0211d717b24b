"""`mlxd run/chat --server URL`: Ctrl-C stops the answer and the server cancels the request
(its /metrics shows none running) and serves the next one; a server that dies mid-answer is
one error line; the chat REPL (pty and piped) works over HTTP as it does in-process."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import MLXD, one_json_line, run_mlxd
from tests.e2e.cli.pty_session import PtySession
from tests.e2e.cli.remote import KEY, cancelled, running, wait_cancelled
from tests.e2e.server.serverproc import ServerProcess, launch, wait_for
from tests.signals import default_sigint

ENDLESS = ("tiny-long", "Tell me everything", "--ignore-eos", "--max-tokens", "60000")
PROMPT = r">>>"


def start_run(server: ServerProcess, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*MLXD, "run", "--server", server.url, "--api-key", KEY, *ENDLESS, "--hide-reasoning",
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
        preexec_fn=default_sigint,
    )  # fmt: skip


def test_ctrl_c_cancels_the_servers_request(
    remote: ServerProcess, remote_env: dict[str, str]
) -> None:
    before = cancelled(remote)
    proc = start_run(remote, remote_env)
    try:
        assert proc.stdout is not None and proc.stdout.read(1)  # the answer is streaming
        assert running(remote) == 1
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.decode().splitlines()[-1] == "mlxd: error: interrupted"
    wait_cancelled(remote, before)  # closing the stream cancelled the generation
    after = run_mlxd(
        "run", "--server", remote.url, "--api-key", KEY, "tiny-long", "hi", "--max-tokens", "3",
        "--json", env=remote_env,
    )  # fmt: skip
    assert after.returncode == 0, after.stderr
    assert one_json_line(after.stdout)["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("json_mode", [False, True], ids=["line", "json"])
def test_a_server_that_dies_mid_answer_is_one_error(
    tiny_chat_model: Path, remote_env: dict[str, str], json_mode: bool
) -> None:
    server = launch(["--model", str(tiny_chat_model), "--api-key", KEY], remote_env)
    proc = start_run(server, remote_env, *(["--json"] if json_mode else []))
    try:
        wait_for(lambda: running(server) == 1, "the answer to start")
        server.proc.kill()  # no goodbye: the connection drops mid-stream
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        server.stop()
    assert proc.returncode == 5, err
    assert "Traceback" not in err.decode()
    if json_mode:
        assert out == b""
        error = one_json_line(err.decode())["error"]
        assert error["code"] == "unavailable" and "server" in error["message"]
    else:
        [line] = err.decode().splitlines()
        assert line.startswith("mlxd: error: the ") and "server" in line, line


@pytest.fixture
def chat(remote: ServerProcess, remote_env: dict[str, str]) -> Iterator:
    sessions: list[PtySession] = []

    def start(*args: str) -> PtySession:
        env = remote_env | {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "MLXD_API_KEY": KEY}
        session = PtySession([*MLXD[1:], "chat", "--server", remote.url, *args], env)
        sessions.append(session)
        session.expect(rf"Chatting with \S+ on {remote.url}\. /help")
        session.expect(PROMPT)
        return session

    yield start
    for session in sessions:
        session.close()


def command(session: PtySession, line: str, reply: str) -> None:
    session.send(line + "\r")
    session.expect(reply)
    session.expect(PROMPT)


def test_repl_over_http_cancels_and_keeps_chatting(chat, remote: ServerProcess) -> None:
    """^C mid-answer cancels the server's request and returns to the prompt; the next turn
    is answered whole, and the chat goes on."""
    session = chat("tiny-long", "--ignore-eos", "--max-tokens", "1000")
    before = cancelled(remote)
    session.send("Tell me everything\r")
    session.expect(r"Tell me everything\n.+")  # streaming (~4 s in all)
    session.send("\x03")
    session.expect(r"\[answer cancelled\]")
    session.expect(PROMPT)
    wait_cancelled(remote, before)  # the server dropped the request
    assert session.alive()
    command(session, "/stats", "no answer yet")  # the cancelled turn was dropped
    command(session, "/system Be brief.", "System prompt set")
    command(session, "Tell me more", r"Tell me more\n.+")
    assert "[answer cancelled]" not in session.text[session.text.index("Tell me more") :]
    command(session, "/stats", r"completion 1000 tokens.*\n.*session: 1 answer,")
    session.send("\x04")  # Ctrl-D at an empty prompt
    session.expect("Bye")
    assert session.wait() == 0


def test_piped_chat_over_http_equals_in_process(
    remote: ServerProcess, remote_env: dict[str, str], tiny_chat_model: Path
) -> None:
    """Turns, /stats (the second turn's history comes from the prefix cache), /clear."""
    script = "Hi\nWhat did I just say?\n/stats\n/clear\nHi\n"
    args = ("--max-tokens", "6", "--temperature", "0")
    over_http = run_mlxd(
        "chat", "--server", remote.url, "--api-key", KEY, *args, env=remote_env, input=script
    )
    local = run_mlxd("chat", str(tiny_chat_model), *args, env=remote_env, input=script)
    assert over_http.returncode == local.returncode == 0, over_http.stderr + local.stderr
    answers = [_answers(p.stdout) for p in (over_http, local)]
    assert answers[0] == answers[1] and len(answers[0]) == 3
    assert answers[0][0] == answers[0][2]  # /clear: the same first turn again
    stats = next(x for x in over_http.stdout.splitlines() if x.startswith("last answer"))
    cached = int(stats.split("(")[1].split()[0])
    assert cached > 0  # the server's prefix cache served the first turn


def _answers(stdout: str) -> list[str]:
    skip = ("last answer", "session:", "New conversation")
    return [x for x in stdout.splitlines() if not x.startswith(skip)]
