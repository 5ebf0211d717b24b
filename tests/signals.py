"""Children that a test interrupts get SIGINT at its default disposition.

A test run started from a script in the background (`bash scripts/test.sh &`, nohup) inherits
an ignored SIGINT, and an ignored signal stays ignored across fork and exec: the child would
never see the test's Ctrl-C. Pass `preexec_fn=default_sigint` to Popen (or call it in a
forked child before exec) in every test that sends SIGINT.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """In the child, before exec: SIGINT back to SIG_DFL (Python then installs its own
    KeyboardInterrupt handler at start-up, as it does when run from a terminal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
