"""EmbedQueue.take: one model per batch, first come first served, within the step budget."""

from __future__ import annotations

from concurrent.futures import Future

from mlxd.engine.embedding import EmbedJob, EmbedPace, EmbedQueue, EmbedRequest


def _job(name: str, model: str, lengths: list[int]) -> EmbedJob:
    return EmbedJob(name, EmbedRequest(model, [[1] * n for n in lengths]), Future())


def test_rows_of_many_jobs_share_a_batch_within_the_budget() -> None:
    queue, budget = EmbedQueue(), lambda _: 12
    a, b = _job("a", "m", [2, 3]), _job("b", "m", [3, 3, 3])
    queue.add(a)
    queue.add(b)
    first = queue.take(budget)
    assert first is not None and [(j.request_id, i) for j, i in first.rows] == [
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("b", 1),
    ]  # 4 rows x 3 tokens = 12
    second = queue.take(budget)
    assert second is not None and [(j.request_id, i) for j, i in second.rows] == [("b", 2)]
    assert queue.take(budget) is None  # every row taken (the jobs stay until answered)


def test_a_row_longer_than_the_budget_runs_alone() -> None:
    queue = EmbedQueue()
    queue.add(_job("a", "m", [9, 1]))
    batch = queue.take(lambda _: 4)
    assert batch is not None and [i for _, i in batch.rows] == [0]


def test_one_model_per_batch_oldest_first() -> None:
    queue = EmbedQueue()
    queue.add(_job("a", "enc", [2]))
    queue.add(_job("b", "dec", [2]))
    queue.add(_job("c", "enc", [2]))
    batch = queue.take(lambda _: 100)
    assert batch is not None and batch.model == "enc"
    assert [j.request_id for j, _ in batch.rows] == ["a", "c"]
    assert queue.models_in_use() == {"enc", "dec"}


def test_pace_fits_the_step_time_beside_decoding_rows() -> None:
    pace = EmbedPace(step_tokens=2048, step_s=0.02)
    assert pace.budget("m", decoding=True) == 2048  # unmeasured: the first batch measures
    pace.measured("m", tokens=1000, seconds=0.1)  # 100 us per token
    assert pace.budget("m", decoding=True) == 200  # 20 ms of it
    assert pace.budget("m", decoding=False) == 2048  # nothing decodes: the whole budget
    assert pace.budget("other", decoding=True) == 2048  # per model
    pace.measured("m", tokens=10, seconds=10.0)
    assert pace.budget("m", decoding=True) == 1  # never zero: one row always runs
