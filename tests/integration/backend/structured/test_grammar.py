"""Compiling output constraints (backend.grammar) within their budgets, and the per-row mask
(backend.grammar_mask) on the tiny checkpoint's real tokenizer, with hand-made logits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import llguidance
import mlx.core as mx
import pytest

from mlxd.backend.structured import grammar as grammar_mod
from mlxd.backend.structured.compile_pool import shared_pool
from mlxd.backend.structured.grammar import CompiledGrammar, compile_constraint
from mlxd.backend.structured.grammar_mask import GrammarError, GrammarMask
from mlxd.backend.tokenizer.checkpoint_tokenizer import CheckpointTokenizer
from mlxd.errors import InvalidRequest
from mlxd.types import OutputConstraint
from tests.hostile import SLOW_SCHEMA

ENUM = {"enum": ["yes", "no"]}


@pytest.fixture(scope="module")
def tok(tiny_chat_model: Path) -> CheckpointTokenizer:
    return CheckpointTokenizer(tiny_chat_model)


def compile_(tok: CheckpointTokenizer, schema: Any, **fields: Any) -> CompiledGrammar:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    eos = {tok.convert_tokens_to_ids("<|im_end|>")}
    return compile_constraint(OutputConstraint(text, **fields), tok, len(tok), eos)  # type: ignore[arg-type]


def test_a_schema_compiles_once_and_each_sequence_gets_its_own_matcher(tok):
    first, again = compile_(tok, ENUM), compile_(tok, ENUM)
    assert first.matcher is again.matcher  # cached: the client repeats its schema
    a, b = first.new_matcher(), first.new_matcher()
    assert a is not b and a is not first.matcher
    assert a.consume_tokens(tok.encode('"yes"')) and not b.is_accepting()


@pytest.mark.parametrize(
    "schema, words",
    [
        ({"type": "strin"}, "strin"),
        ({"type": "string", "pattern": "(a"}, "regex"),
        ({"not": {"type": "string"}}, "not"),
        ({"$ref": "#/nowhere"}, "nowhere"),
        ("[1, 2]", "JSON object"),
        ("{not json", "not valid JSON"),
        ({"type": "integer", "minimum": 5, "maximum": 1}, ""),
    ],
)
def test_bad_schemas_are_refused_naming_the_field(tok, schema, words):
    with pytest.raises(InvalidRequest) as err:
        compile_(tok, schema)
    assert err.value.param == "response_format" and words in err.value.message
    assert "\n" not in err.value.message


def test_the_error_names_the_field_the_constraint_came_from(tok):
    with pytest.raises(InvalidRequest) as err:
        compile_(tok, {"type": "strin"}, param="tool_choice")
    assert err.value.param == "tool_choice"


def deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def test_deep_nesting_is_refused(tok):
    with pytest.raises(InvalidRequest) as err:
        compile_(tok, deep(200))
    assert err.value.param == "response_format" and "recursion" in err.value.message


def test_a_schema_over_the_size_budget_is_refused_before_any_compile(tok, monkeypatch):
    huge = {"enum": [f"value{i}" for i in range(100_000)]}  # 1.3 MB

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the size check must come before the compile")

    monkeypatch.setattr(llguidance, "LLMatcher", never)
    with pytest.raises(InvalidRequest) as err:
        compile_(tok, huge)
    assert err.value.param == "response_format" and "MLXD_GRAMMAR_BYTES" in err.value.message
    monkeypatch.setenv("MLXD_GRAMMAR_BYTES", "100")
    with pytest.raises(InvalidRequest):
        compile_(tok, {"enum": [f"v{i}" for i in range(30)]})  # ~250 bytes


def test_a_compile_over_the_time_budget_is_refused_and_not_cached(tok, monkeypatch):
    slow = {"enum": [f"word{i}" for i in range(3000)]}  # tens of milliseconds to compile
    monkeypatch.setenv("MLXD_GRAMMAR_SECONDS", "0.000001")
    with pytest.raises(InvalidRequest) as err:
        compile_(tok, slow)
    assert err.value.param == "response_format" and "MLXD_GRAMMAR_SECONDS" in err.value.message
    monkeypatch.delenv("MLXD_GRAMMAR_SECONDS")
    assert compile_(tok, slow).mask_size >= len(tok)  # within the default budget it compiles


def test_a_slow_schema_is_refused_within_its_budget_and_its_compile_is_killed(tok, monkeypatch):
    monkeypatch.setenv("MLXD_GRAMMAR_SECONDS", "0.3")
    with pytest.raises(InvalidRequest) as err:
        compile_(tok, SLOW_SCHEMA)
    assert err.value.param == "response_format" and "MLXD_GRAMMAR_SECONDS" in err.value.message
    assert shared_pool().busy == 0  # the slow compile's worker was killed
    assert compile_(tok, {"enum": ["after"]}).mask_size >= len(tok)


def test_validations_are_cached_across_models(tok, monkeypatch):
    schema = {"enum": ["cached"]}
    compile_(tok, schema)
    grammar_mod._MODELS[tok].compiled.clear()  # as if another model asked for it

    def never(*args: object) -> None:
        raise AssertionError("a known grammar is not validated again")

    monkeypatch.setattr(shared_pool(), "validate", never)
    assert compile_(tok, schema).mask_size >= len(tok)


SELF = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}


@pytest.mark.parametrize("schema", [{"$ref": "#"}, SELF], ids=["self", "required-self"])
def test_a_schema_with_no_finite_instance_is_refused(tok, schema):
    with pytest.raises(InvalidRequest) as err:
        compile_(tok, schema, param="tool_choice")
    assert err.value.param == "tool_choice" and "no finite JSON value" in err.value.message


def test_a_grammar_that_cannot_start_is_refused_whatever_the_schema_check_says(tok, monkeypatch):
    monkeypatch.setattr(grammar_mod, "has_finite_instance", lambda schema: True)
    with pytest.raises(InvalidRequest) as err:
        compile_(tok, {"$ref": "#"})
    assert "no finite JSON value" in err.value.message


# ---- the mask ---------------------------------------------------------------------------


def allowed(mask: GrammarMask, context: list[int], width: int) -> set[int]:
    """One processor call (it feeds context[-1] unless it is the first call)."""
    return kept(mask(mx.array(context, dtype=mx.int32), mx.zeros((1, width))))


def kept(out: mx.array) -> set[int]:
    return {i for i, v in enumerate(out[0].tolist()) if v != float("-inf")}


def test_the_mask_keeps_exactly_the_tokens_the_grammar_allows(tok):
    g = compile_(tok, ENUM)
    width = len(tok) + 7  # a model's logits may be wider than its vocabulary
    mask = GrammarMask(g)
    first = allowed(mask, [1, 2, 3], width)  # call 1: the prompt's last token is not fed
    assert first and all(tok.decode([t]).startswith('"') for t in first)
    assert max(first) < len(tok)
    quote = tok.encode('"')[0]
    then = {tok.decode([t]) for t in allowed(mask, [1, 2, 3, quote], width)}
    assert then and all('yes"'.startswith(t) or 'no"'.startswith(t) for t in then)


def test_a_token_outside_the_grammar_fails_the_sequence(tok):
    mask = GrammarMask(compile_(tok, ENUM))
    allowed(mask, [1], len(tok))
    with pytest.raises(GrammarError):
        allowed(mask, [1, tok.encode("x")[0]], len(tok))


def free_but_eos(out: mx.array, logits: mx.array, tok: CheckpointTokenizer) -> bool:
    """Reasoning: every token as it was, but EOS, which cannot end the turn before the answer."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    rest = [i for i in range(len(tok)) if i != eos]
    same = mx.array_equal(out[..., mx.array(rest)], logits[..., mx.array(rest)])
    return bool(same) and out[0, eos].item() == float("-inf")


def test_reasoning_passes_untouched_until_its_end_marker(tok):
    g = compile_(tok, ENUM, reasoning=("<think>", "</think>"), reasoning_open=True)
    mask = GrammarMask(g)
    logits = mx.arange(len(tok), dtype=mx.float32)[None]
    ctx = [1]
    assert free_but_eos(mask(mx.array(ctx), logits), logits, tok)  # free but for EOS
    for token in [*tok.encode("plan a b"), tok.convert_tokens_to_ids("</think>")]:
        ctx.append(token)
        out = mask(mx.array(ctx), logits)
    assert not mx.array_equal(out, logits)  # the answer: masked
    assert all(tok.decode([t]).startswith('"') for t in kept(out))


def test_the_first_token_may_open_reasoning_when_the_prompt_did_not(tok):
    g = compile_(tok, ENUM, reasoning=("<think>", "</think>"))
    think = tok.convert_tokens_to_ids("<think>")
    assert g.reasoning_start == think and not g.reasoning_open
    first = allowed(GrammarMask(g), [1], len(tok))
    assert think in first and len(first) > 1
    mask = GrammarMask(g)
    allowed(mask, [1], len(tok))
    logits = mx.zeros((1, len(tok)))
    assert free_but_eos(mask(mx.array([1, think]), logits), logits, tok)  # now reasoning


def test_the_tokenizer_is_built_once_per_model(tok, monkeypatch):
    compile_(tok, ENUM)
    calls: list[object] = []
    real = llguidance.LLTokenizer
    monkeypatch.setattr(llguidance, "LLTokenizer", lambda *a, **k: calls.append(a) or real(*a, **k))
    compile_(tok, {"enum": ["other"]})
    assert calls == []
    assert grammar_mod.grammar_tokenizer(tok, len(tok), set()) is compile_(tok, ENUM).tokenizer


def accepts(grammar: CompiledGrammar, tok: CheckpointTokenizer, text: str) -> bool:
    matcher = grammar.new_matcher()
    return all(matcher.consume_token(t) for t in tok.encode(text)) and matcher.is_accepting()


def test_numbers_and_strings_without_bounds_are_capped_by_default(tok, monkeypatch):
    """pydantic-ai moves minimum/maximum into descriptions: the grammar caps digits itself
    (MLXD_GRAMMAR_INTEGER_DIGITS, _FRACTION_DIGITS, _STRING_CHARS)."""
    monkeypatch.setenv("MLXD_GRAMMAR_STRING_CHARS", "8")
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "x": {"type": "number"}, "s": {"type": "string"}},
        "required": ["n", "x", "s"],
    }
    grammar = compile_(tok, schema)

    def body(n: str, x: str = "1.5", s: str = "ok") -> str:
        return f'{{"n": {n}, "x": {x}, "s": "{s}"}}'

    assert accepts(grammar, tok, body("-" + "9" * 15))
    assert not accepts(grammar, tok, body("1" * 16))
    assert accepts(grammar, tok, body("1", x="3." + "1" * 10))
    assert not accepts(grammar, tok, body("1", x="3." + "1" * 11))
    assert not accepts(grammar, tok, body("1", x="1e5"))
    assert accepts(grammar, tok, body("1", s="a" * 8))
    assert not accepts(grammar, tok, body("1", s="a" * 9))
    monkeypatch.setenv("MLXD_GRAMMAR_INTEGER_DIGITS", "0")
    assert accepts(compile_(tok, schema), tok, body("1" * 40))
