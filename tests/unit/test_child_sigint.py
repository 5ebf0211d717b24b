"""The test helpers that start children a test interrupts give them a default SIGINT, even
when the test run itself ignores SIGINT (started in the background from a script)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.e2e.cli.pty_session import PtySession
from tests.signals import default_sigint

SHOW = (
    "import signal; h = signal.getsignal(signal.SIGINT); "
    "print('SIGINT', 'ignored' if h == signal.SIG_IGN else getattr(h, '__name__', h))"
)


@pytest.fixture
def ignored_sigint() -> Iterator[None]:
    """This process ignores SIGINT, like `bash scripts/test.sh &` run from a script."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, previous)


def show(**popen: object) -> str:
    return subprocess.run(
        [sys.executable, "-c", SHOW], capture_output=True, text=True, timeout=30, **popen
    ).stdout.strip()  # type: ignore[call-overload]


def test_an_ignored_sigint_is_inherited_without_the_helper(ignored_sigint: None) -> None:
    assert show() == "SIGINT ignored"  # what the helper is for


def test_popen_with_default_sigint(ignored_sigint: None) -> None:
    assert show(preexec_fn=default_sigint) == "SIGINT default_int_handler"


def test_pty_session_child_has_default_sigint(ignored_sigint: None) -> None:
    session = PtySession(["-c", SHOW], {})
    try:
        assert session.expect(r"SIGINT (\w+)").group(1) == "default_int_handler"
        assert session.wait() == 0
    finally:
        session.close()
