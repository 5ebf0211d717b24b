"""A streamed response's cleanup (cancel the stream, end the generation) runs on the event loop:
the Lifecycle's drain waits on an asyncio.Event, which only the loop's thread may set."""

from __future__ import annotations

import threading

import pytest

from mlxd.types import TextDelta
from tests.unit.server.scripted_app import DONE, run


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_stream_cleanup_runs_on_the_event_loop_thread(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    body = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response, stream = run(monkeypatch, [TextDelta("a"), DONE], path, body)
    assert response.status_code == 200
    assert stream.cancel_threads  # the cleanup ran
    assert set(stream.cancel_threads) == {threading.get_ident()}  # asyncio.run's thread
