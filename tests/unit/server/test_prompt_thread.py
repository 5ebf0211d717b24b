"""The prompt is rendered and tokenized (chat.session.start_chat) off the event loop's thread:
a 16k-token prompt there would stall every other stream's tokens while it tokenizes."""

from __future__ import annotations

import threading

import pytest

from mlxd.types import TextDelta
from tests.unit.server.scripted_app import DONE, run


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_start_chat_runs_off_the_event_loop_thread(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    body = {
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
    }
    response, stream = run(monkeypatch, [TextDelta("a"), DONE], path, body)
    assert response.status_code == 200, response.text
    assert stream.start_thread != threading.get_ident()  # not asyncio.run's thread
