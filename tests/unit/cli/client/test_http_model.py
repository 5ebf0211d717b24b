"""HttpModel's reading of servers that are not mlxd, on a small stdlib HTTP server shaped
like vllm-mlx (no GET /v1/models/NAME route: FastAPI's {"detail": ...} 404s), and one that
lists nothing. tests/e2e/cli/test_other_server.py drives a real mlx_lm.server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mlxd.chat.chat_request import ChatRequest
from mlxd.cli.client.http_model import HttpModel, server_address
from mlxd.errors import EngineUnavailable, ModelNotFound

SERVED = "/models/tiny-chat"


class NoCardRoute(BaseHTTPRequestHandler):
    listing = True  # GET /v1/models answers a list

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/v1/models" and self.listing:
            self._reply(200, {"object": "list", "data": [{"id": SERVED, "object": "model"}]})
        else:
            self._reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._reply(404, {"detail": f"The model `{body['model']}` does not exist."})

    def _reply(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


class NoList(NoCardRoute):
    listing = False


def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def no_card_route() -> Iterator[str]:
    yield from serve(NoCardRoute)


@pytest.fixture
def no_list() -> Iterator[str]:
    yield from serve(NoList)


def test_a_listed_model_is_found_without_a_card_route(no_card_route: str) -> None:
    client = HttpModel.connect(server_address(no_card_route), "", SERVED)
    assert client.name == SERVED


def test_an_unlisted_model_is_not_served_and_the_list_is_named(no_card_route: str) -> None:
    with pytest.raises(ModelNotFound) as info:
        HttpModel.connect(server_address(no_card_route), "", "nosuch")
    assert info.value.message == (
        f"the server at {no_card_route} does not serve a model named 'nosuch'; it lists: {SERVED}"
    )
    with pytest.raises(ModelNotFound, match=f"no default model: name one; it lists: {SERVED}"):
        HttpModel.connect(server_address(no_card_route), "", None)


def test_a_chat_404_for_an_unlisted_model_says_so_in_the_servers_words(
    no_card_route: str,
) -> None:
    client = HttpModel(server_address(no_card_route), "gone")  # say, removed since connect
    with pytest.raises(ModelNotFound) as info:
        client.ask(ChatRequest([{"role": "user", "content": "hi"}]))
    assert info.value.message == (
        f"the server at {no_card_route} does not serve a model named 'gone'; it lists: "
        f"{SERVED} (it answered 404: The model `gone` does not exist.)"
    )


def test_no_model_list_either_asks_for_the_url(no_list: str) -> None:
    with pytest.raises(EngineUnavailable) as info:
        HttpModel.connect(server_address(no_list), "", "any")
    message = info.value.message
    assert message.startswith(f"{no_list}/v1/models/any answered 404 (Not Found)")
    assert "GET /v1/models gave no model list" in message and "mlxd server" not in message
    client = HttpModel(server_address(no_list), "any")
    with pytest.raises(EngineUnavailable, match=r"chat/completions answered 404 \(The model"):
        client.ask(ChatRequest([{"role": "user", "content": "hi"}]))
