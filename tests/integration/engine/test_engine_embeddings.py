"""Embedding requests on the engine thread, on both kinds of tiny embedding checkpoint: a row
alone and inside batches gives the same vector, vectors are unit length, bad requests are
refused at submit and the next one is served, and embeddings run beside streaming chats."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from mlxd.engine import EmbedRequest, EngineRequest, ModelInfo
from mlxd.errors import InvalidRequest
from mlxd.types import ModelKind, SamplingParams
from tests.integration.engine.conftest import EngineFactory

# Vectors are float32 and normalized: a row padded into a batch differs from the same row
# alone by matmul rounding at most (measured 0.0 on these checkpoints); 1e-5 per component.
TOLERANCE = 1e-5
TEXTS = [
    f"text number {i}: the quick brown fox jumps over the lazy dog {i * 'ab '}" for i in range(32)
]

KINDS = ["tiny_encoder_model", "tiny_decoder_embedding_model"]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def _rows(info: ModelInfo, texts: list[str]) -> list[list[int]]:
    return [info.tokenizer.encode(t) for t in texts]


@pytest.fixture(params=KINDS)
def embedder(request: pytest.FixtureRequest, make_engine: EngineFactory):
    engine = make_engine(embed_step_tokens=4096)
    path: Path = request.getfixturevalue(request.param)
    return engine, engine.load_model(path)


def test_model_info_says_embedding(embedder) -> None:
    _, info = embedder
    assert info.kind is ModelKind.EMBEDDING and info.dimensions == 64


def test_alone_equals_inside_a_batch_of_32(embedder) -> None:
    engine, info = embedder
    rows = _rows(info, TEXTS)
    alone = [engine.embed(EmbedRequest(info.name, [r])).result(60).vectors[0] for r in rows]
    batched = engine.embed(EmbedRequest(info.name, rows)).result(60).vectors
    handles = [engine.embed(EmbedRequest(info.name, [r])) for r in rows]  # 32 clients at once
    clients = [h.result(60).vectors[0] for h in handles]
    for single, in_batch, other in zip(alone, batched, clients, strict=True):
        assert max(abs(x - y) for x, y in zip(single, in_batch, strict=True)) <= TOLERANCE
        assert max(abs(x - y) for x, y in zip(single, other, strict=True)) <= TOLERANCE
    assert len({tuple(round(x, 4) for x in v) for v in alone}) == len(alone)  # all differ


def test_unit_length_and_cosine(embedder) -> None:
    engine, info = embedder
    result = engine.embed(EmbedRequest(info.name, _rows(info, ["Paris", "Paris", "a dog"])))
    same, again, other = result.result(60).vectors
    assert math.isclose(sum(x * x for x in same), 1.0, abs_tol=1e-5)
    assert math.isclose(_cosine(same, again), 1.0, abs_tol=1e-6)
    assert _cosine(same, other) < 1.0 - 1e-4
    assert result.result().prompt_tokens == sum(
        len(r) for r in _rows(info, ["Paris", "Paris", "a dog"])
    )


def test_small_step_budget_splits_a_request_and_keeps_its_order(
    make_engine: EngineFactory, tiny_encoder_model: Path
) -> None:
    engine = make_engine(embed_step_tokens=16)  # one or two rows per step
    info = engine.load_model(tiny_encoder_model)
    rows = _rows(info, TEXTS[:6])
    split = engine.embed(EmbedRequest(info.name, rows)).result(60).vectors
    whole = [engine.embed(EmbedRequest(info.name, [r])).result(60).vectors[0] for r in rows]
    assert [[round(x, 5) for x in v] for v in split] == [[round(x, 5) for x in v] for v in whole]


@pytest.mark.parametrize(
    ("inputs", "says"),
    [
        ([], "at least one"),
        ([[5]] * 100_000, "at most 2048"),
        ([[5] * 10_000], "takes at most"),
        ([[5], []], "input[1] is empty"),
        ([[10**6]], "outside the vocabulary"),
    ],
    ids=["empty", "1e5-inputs", "too-long", "empty-row", "bad-id"],
)
def test_bad_requests_are_refused_and_the_next_is_served(embedder, inputs, says) -> None:
    engine, info = embedder
    with pytest.raises(InvalidRequest, match=says.replace("[", r"\[").replace("]", r"\]")):
        engine.embed(EmbedRequest(info.name, inputs))
    assert len(engine.embed(EmbedRequest(info.name, [[5, 6]])).result(60).vectors) == 1


def test_wrong_kind_both_ways(
    make_engine: EngineFactory, tiny_encoder_model, tiny_chat_model
) -> None:
    engine = make_engine()
    enc, chat = engine.load_model(tiny_encoder_model), engine.load_model(tiny_chat_model)
    with pytest.raises(InvalidRequest, match="serves embeddings"):
        engine.submit(EngineRequest(enc.name, [2, 5, 3], SamplingParams(max_tokens=2)))
    with pytest.raises(InvalidRequest, match="is not an embedding model"):
        engine.embed(EmbedRequest(chat.name, [[5, 6]]))


def test_cancel_before_it_runs_frees_the_queue(embedder) -> None:
    engine, info = embedder
    handle = engine.embed(EmbedRequest(info.name, _rows(info, TEXTS)))
    handle.cancel()
    assert len(engine.embed(EmbedRequest(info.name, [[5]])).result(60).vectors) == 1
    assert engine.stats().waiting == 0


def test_embeddings_beside_streaming_chats_leave_greedy_output_unchanged(
    make_engine: EngineFactory, tiny_chat_model: Path, tiny_encoder_model: Path
) -> None:
    engine = make_engine(max_batch=8, embed_step_tokens=256)
    chat, enc = engine.load_model(tiny_chat_model), engine.load_model(tiny_encoder_model)
    prompts = [chat.tokenizer.encode(f"question {i}: what is {i} plus {i}?") for i in range(8)]
    params = SamplingParams(max_tokens=24)
    alone = [engine.submit(EngineRequest(chat.name, p, params)).collect()[0] for p in prompts]
    stop = threading.Event()
    served: list[int] = []

    def load() -> None:
        while not stop.is_set():
            served.append(
                len(engine.embed(EmbedRequest(enc.name, _rows(enc, TEXTS))).result(60).vectors)
            )

    clients = [threading.Thread(target=load) for _ in range(2)]
    for c in clients:
        c.start()
    handles = [engine.submit(EngineRequest(chat.name, p, params)) for p in prompts]
    beside = [h.collect()[0] for h in handles]
    stop.set()
    for c in clients:
        c.join(60)
    assert beside == alone
    assert served and set(served) == {32}


def test_a_flat_headless_decoder_checkpoint_loads_and_agrees(
    make_engine: EngineFactory, tmp_path: Path, tiny_decoder_embedding_model: Path
) -> None:
    """Qwen's own Qwen3-Embedding layout: body keys without `model.`, no head, untied."""
    from tests.embedding_checkpoints import make_decoder

    flat = make_decoder(tmp_path / "flat", flat=True)
    engine = make_engine()
    nested, bare = engine.load_model(tiny_decoder_embedding_model), engine.load_model(flat)
    rows = _rows(nested, TEXTS[:4])
    a = engine.embed(EmbedRequest(nested.name, rows)).result(60).vectors
    b = engine.embed(EmbedRequest(bare.name, rows)).result(60).vectors
    assert all(
        max(abs(x - y) for x, y in zip(u, v, strict=True)) <= TOLERANCE
        for u, v in zip(a, b, strict=True)
    )


def test_xlm_roberta_fits_its_window_and_batches(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    """XLM-R counts positions from pad_token_id + 1: 66 positions hold 65 tokens (pad id 0)."""
    from tests.embedding_checkpoints import make_encoder

    engine = make_engine()
    info = engine.load_model(make_encoder(tmp_path / "xlmr", family="xlm-roberta"))
    assert info.context_window == 65
    full = engine.embed(EmbedRequest(info.name, [[5] * 65])).result(60).vectors[0]
    assert all(math.isfinite(x) for x in full)
    with pytest.raises(InvalidRequest, match="takes at most 65"):
        engine.embed(EmbedRequest(info.name, [[5] * 66]))
    rows = _rows(info, TEXTS[:8])
    alone = [engine.embed(EmbedRequest(info.name, [r])).result(60).vectors[0] for r in rows]
    batched = engine.embed(EmbedRequest(info.name, rows)).result(60).vectors
    for a, b in zip(alone, batched, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= TOLERANCE


def test_nomic_bert_alone_equals_inside_a_batch_of_32(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    """mlxd's own nomic-bert network on the engine: rotary positions count from 0 in every
    row, so right padding changes nothing; its window is n_positions (128 here)."""
    from tests.hf_encoder_checkpoints import make_nomic

    engine = make_engine(embed_step_tokens=4096)
    info = engine.load_model(make_nomic(tmp_path / "nomic"))
    assert info.kind is ModelKind.EMBEDDING and info.dimensions == 32
    assert info.context_window == 128
    rows = _rows(info, [f"search_document: {t}" for t in TEXTS])
    alone = [engine.embed(EmbedRequest(info.name, [r])).result(60).vectors[0] for r in rows]
    batched = engine.embed(EmbedRequest(info.name, rows)).result(60).vectors
    for a, b in zip(alone, batched, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= TOLERANCE
    assert len({tuple(round(x, 4) for x in v) for v in alone}) == len(alone)
