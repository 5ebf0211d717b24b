"""Embeddings on a real `mlxd serve`: /v1/embeddings through the openai SDK and langchain's
OpenAIEmbeddings, /api/embed and /api/embeddings through the ollama client, on a tiny encoder
(BERT) and a tiny decoder (Qwen3) embedding model from the store, and nomic-bert and RoBERTa
in Hugging Face's layout; wrong kinds and bad inputs are 400 and the next request is served;
embeddings beside 8 streaming chats leave the chats' greedy output unchanged."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.embedding_checkpoints import make_decoder, make_encoder
from tests.hf_encoder_checkpoints import make_nomic, make_roberta

MODELS = ["bge-tiny", "qwen3-embed-tiny"]
TEXTS = ["The capital of France is Paris.", "A dog jumps over the lazy fox.", "hello"]


@pytest.fixture(scope="module")
def embed_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("embed-home")
    make_encoder(home / "mlxd" / "models" / "bge-tiny")
    make_decoder(home / "mlxd" / "models" / "qwen3-embed-tiny")
    make_nomic(home / "mlxd" / "models" / "nomic-tiny")
    make_roberta(home / "mlxd" / "models" / "roberta-tiny")
    return home


@pytest.fixture(scope="module")
def embed_server(embed_home: Path, tiny_chat_model: Path) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(tiny_chat_model), "--max-batch", "8"], server_env(embed_home))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def sdk(embed_server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=embed_server.base_url, api_key="unused", max_retries=0, timeout=120
    )


def _norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def _close(a: list[float], b: list[float], tol: float = 1e-5) -> bool:
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b, strict=True)) <= tol


@pytest.mark.parametrize("model", MODELS)
def test_openai_sdk_embeddings_create(sdk: openai.OpenAI, model: str) -> None:
    many = sdk.embeddings.create(model=model, input=TEXTS)  # the SDK asks for base64
    floats = sdk.embeddings.create(model=model, input=TEXTS, encoding_format="float")
    assert [d.index for d in many.data] == [0, 1, 2] and many.model == model
    assert many.usage.prompt_tokens == many.usage.total_tokens > len(TEXTS)
    for a, b in zip(many.data, floats.data, strict=True):
        assert len(a.embedding) == 64 and _close(a.embedding, b.embedding, 1e-6)
        assert math.isclose(_norm(a.embedding), 1.0, abs_tol=1e-5)
    one = sdk.embeddings.create(model=model, input=TEXTS[0], encoding_format="float")
    assert _close(one.data[0].embedding, floats.data[0].embedding)


@pytest.mark.parametrize("model", MODELS)
def test_token_ids_and_dimensions(sdk: openai.OpenAI, http_embed: httpx.Client, model: str) -> None:
    ids = [[5, 9, 17, 3], [7, 7, 7]]
    pair = sdk.embeddings.create(model=model, input=ids, encoding_format="float")
    single = sdk.embeddings.create(model=model, input=ids[0], encoding_format="float")
    assert len(pair.data) == 2 and pair.usage.prompt_tokens == 7
    assert _close(pair.data[0].embedding, single.data[0].embedding)
    cut = sdk.embeddings.create(model=model, input=ids[0], dimensions=16, encoding_format="float")
    head = single.data[0].embedding[:16]
    assert _close(cut.data[0].embedding, [x / _norm(head) for x in head])
    too_wide = http_embed.post(
        "/v1/embeddings", json={"model": model, "input": "x", "dimensions": 65}
    )
    assert too_wide.status_code == 400 and too_wide.json()["error"]["param"] == "dimensions"


@pytest.mark.parametrize("model", ["nomic-tiny", "roberta-tiny"])
def test_hugging_face_layout_encoders_answer_as_in_process(
    sdk: openai.OpenAI, embed_home: Path, model: str
) -> None:
    """nomic-bert (mlxd's own network) and RoBERTa (mlx-embeddings' XLM-R class) from their
    Hugging Face layout: the SDK gets the vectors the backend gives in this process."""
    from mlxd.backend.loader import load_checkpoint
    from mlxd.chat.embedding import cut_vector

    loaded = load_checkpoint(embed_home / "mlxd" / "models" / model)
    assert loaded.embedder is not None
    direct = loaded.embedder.embed([loaded.tokenizer.encode(t) for t in TEXTS])
    out = sdk.embeddings.create(model=model, input=TEXTS)  # base64, as the SDK asks
    assert [len(d.embedding) for d in out.data] == [32] * 3
    assert all(_close(a.embedding, b) for a, b in zip(out.data, direct, strict=True))
    cut = sdk.embeddings.create(model=model, input=TEXTS[0], dimensions=16)
    # nomic-bert's cut layer-norms first (its model card's recipe), RoBERTa's just cuts
    assert _close(cut.data[0].embedding, cut_vector(direct[0], 16, loaded.embedder.spec))


@pytest.fixture(scope="module")
def http_embed(embed_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=embed_server.url, timeout=120) as c:
        yield c


def test_langchain_openai_embeddings(embed_server: ServerProcess, sdk: openai.OpenAI) -> None:
    from langchain_openai import OpenAIEmbeddings

    # check_embedding_ctx_length=False: else langchain counts tokens with tiktoken's OpenAI
    # encodings (downloaded at first use) and sends token ids of that vocabulary.
    lc = OpenAIEmbeddings(
        model="bge-tiny",
        base_url=embed_server.base_url,
        api_key="unused",  # type: ignore[arg-type]
        check_embedding_ctx_length=False,
    )
    docs = lc.embed_documents(TEXTS)
    query = lc.embed_query(TEXTS[0])
    direct = sdk.embeddings.create(model="bge-tiny", input=TEXTS, encoding_format="float")
    assert len(docs) == 3 and all(
        _close(d, e.embedding) for d, e in zip(docs, direct.data, strict=True)
    )
    assert _close(query, docs[0])


@pytest.mark.parametrize("model", MODELS)
def test_ollama_client_embed(embed_server: ServerProcess, sdk: openai.OpenAI, model: str) -> None:
    lama = ollama.Client(host=embed_server.url, timeout=120)
    out = lama.embed(model=model, input=TEXTS)
    direct = sdk.embeddings.create(model=model, input=TEXTS, encoding_format="float")
    assert out.model == model and out.prompt_eval_count == direct.usage.prompt_tokens
    assert all(
        _close(list(a), b.embedding) for a, b in zip(out.embeddings, direct.data, strict=True)
    )
    shown = lama.show(model)
    assert shown.capabilities == ["embedding"]  # Ollama's word for the kind
    arch = {"bge-tiny": "bert", "qwen3-embed-tiny": "qwen3"}[model]
    pooling = {"bge-tiny": 2, "qwen3-embed-tiny": 3}[model]  # llama.cpp's cls, last
    assert shown.modelinfo is not None
    assert shown.modelinfo[f"{arch}.embedding_length"] == len(direct.data[0].embedding) == 64
    assert shown.modelinfo[f"{arch}.pooling_type"] == pooling
    legacy = lama.embeddings(model=model, prompt=TEXTS[1])
    assert _close(list(legacy.embedding), direct.data[1].embedding)
    long = lama.embed(model=model, input="word " * 2000)  # truncate: true (Ollama's default)
    assert len(long.embeddings) == 1
    with pytest.raises(ollama.ResponseError) as refused:
        lama.embed(model=model, input="word " * 2000, truncate=False)
    assert refused.value.status_code == 400 and "takes at most" in refused.value.error


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"model": "bge-tiny", "input": []}, "at least one"),
        ({"model": "bge-tiny", "input": ["a"] * 100_000}, "at most 2048"),
        ({"model": "bge-tiny", "input": "word " * 2000}, "takes at most"),
        ({"model": "bge-tiny", "input": ""}, "empty string"),
        ({"model": "bge-tiny", "input": [[1, 2], []]}, "input[1] is empty"),
        ({"model": "default", "input": "hello"}, "is not an embedding model"),
        ({"model": "bge-tiny", "input": [True]}, "input"),
    ],
    ids=[
        "empty-list",
        "1e5-inputs",
        "too-long",
        "empty-string",
        "empty-row",
        "chat-model",
        "bools",
    ],
)
def test_bad_input_is_400_and_the_next_is_served(
    http_embed: httpx.Client, body: dict, says: str
) -> None:
    r = http_embed.post("/v1/embeddings", json=body)
    assert r.status_code == 400 and says in r.json()["error"]["message"]
    ok = http_embed.post("/v1/embeddings", json={"model": "bge-tiny", "input": "next"})
    assert ok.status_code == 200 and len(ok.json()["data"]) == 1


def test_chat_to_an_embedding_model_is_400(sdk: openai.OpenAI, http_embed: httpx.Client) -> None:
    with pytest.raises(openai.BadRequestError) as chat:
        sdk.chat.completions.create(model="bge-tiny", messages=[{"role": "user", "content": "hi"}])
    assert "serves embeddings" in str(chat.value)
    with pytest.raises(openai.BadRequestError):
        sdk.completions.create(model="qwen3-embed-tiny", prompt="hi", max_tokens=2)
    r = http_embed.post(
        "/api/chat", json={"model": "bge-tiny", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 400 and "serves embeddings" in r.json()["error"]


def test_embeddings_beside_8_streaming_chats(sdk: openai.OpenAI) -> None:
    def ask(i: int) -> str:
        stream = sdk.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": f"Count to {i}."}],
            max_tokens=24,
            temperature=0,
            stream=True,
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    alone = [ask(i) for i in range(8)]
    stop, served = threading.Event(), []

    def load() -> None:
        while not stop.is_set():
            served.append(len(sdk.embeddings.create(model="bge-tiny", input=TEXTS * 8).data))

    beside: list[str] = [""] * 8

    def chat(i: int) -> None:
        beside[i] = ask(i)

    loaders = [threading.Thread(target=load) for _ in range(2)]
    chats = [threading.Thread(target=chat, args=(i,)) for i in range(8)]
    for t in loaders + chats:
        t.start()
    for t in chats:
        t.join(120)
    stop.set()
    for t in loaders:
        t.join(120)
    assert beside == alone and served and set(served) == {24}


def test_mlxd_embed_server_equals_the_sdk(embed_server: ServerProcess, sdk: openai.OpenAI) -> None:
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "mlxd.cli.main", "embed", "qwen3-embed-tiny", *TEXTS[:2]]
    done = subprocess.run(
        [*cmd, "--server", embed_server.url, "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    direct = sdk.embeddings.create(
        model="qwen3-embed-tiny", input=TEXTS[:2], encoding_format="float"
    )
    assert body["embeddings"] == [d.embedding for d in direct.data]
    assert body["prompt_tokens"] == direct.usage.prompt_tokens and body["dimensions"] == 64
    chat = subprocess.run(
        [*cmd, "--server", embed_server.url], capture_output=True, text=True, timeout=120
    )
    assert chat.returncode == 0 and len(chat.stdout.splitlines()) == 2
    wrong = subprocess.run(
        [*cmd[:4], "default", "hi", "--server", embed_server.url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode != 0 and "not an embedding model" in wrong.stderr
