"""A grammar compile worker: a child process the server may kill (backend.structured.compile_pool).

Run as a script, never imported: `python -P compile_worker.py READ_FD WRITE_FD MEMORY_BYTES`
(-P: its own folder is not on sys.path; the parent's environment finds llguidance).
It imports only the standard library and llguidance, caps its own address space at its
baseline plus MEMORY_BYTES, says b"ready", then answers each grammar (UTF-8 bytes) with
llguidance's validation error (b"" when the grammar is valid). llguidance's JSON-schema
compiler has work no ParserLimits field bounds (its regex emptiness proof runs a fixed 10,000
derivative steps, each as large as the regex), so that work runs here, where a kill ends it.
It exits when its pipe closes or its parent dies; Ctrl-C is the parent's to handle.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection

_PARENT_POLL_SECONDS = 0.2


def _cap_memory(extra: int) -> None:
    """Address space: what the worker holds now plus `extra` (never above an inherited cap)."""
    with open("/proc/self/statm") as f:  # Linux; elsewhere only the time budget bounds it
        baseline = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = baseline + extra
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or limit < soft:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _exit_with_parent(parent: int) -> None:
    """The compile drops the GIL, so this thread runs meanwhile and ends an orphaned worker."""
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_SECONDS)
    os._exit(0)


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reader, writer = Connection(int(argv[1])), Connection(int(argv[2]))
    import llguidance

    limits = llguidance.LLParserLimits(verbose_errors=False)
    try:
        _cap_memory(int(argv[3]))
    except OSError:
        pass  # no /proc: the time budget still bounds the work
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    writer.send_bytes(b"ready")
    while True:
        try:
            grammar = reader.recv_bytes().decode()
        except (EOFError, OSError):
            return
        bad, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            grammar, None, limits=limits
        )
        error = (messages[0] if messages else "invalid grammar") if bad else ""
        writer.send_bytes(error.encode())


if __name__ == "__main__":
    main(sys.argv)
