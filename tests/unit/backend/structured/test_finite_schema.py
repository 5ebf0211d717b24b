"""has_finite_instance: schemas every instance of which contains itself are told apart from
recursive schemas with a way out, and whatever the check cannot read counts as satisfiable."""

from __future__ import annotations

from typing import Any

import pytest

from mlxd.backend.structured.finite_schema import has_finite_instance

NODE = {"type": "object", "properties": {"next": {"$ref": "#"}}}

IMPOSSIBLE: list[tuple[str, Any]] = [
    ("self", {"$ref": "#"}),
    ("required-self", {**NODE, "required": ["next"]}),
    ("array-of-self", {"type": "array", "items": {"$ref": "#"}, "minItems": 1}),
    ("tuple-of-self", {"type": "array", "prefixItems": [{"$ref": "#"}], "minItems": 1}),
    (
        "two-defs",
        {
            "$defs": {
                "A": {
                    "type": "object",
                    "properties": {"b": {"$ref": "#/$defs/B"}},
                    "required": ["b"],
                },
                "B": {"type": "array", "items": {"$ref": "#/$defs/A"}, "minItems": 2},
            },
            "$ref": "#/$defs/A",
        },
    ),
    ("every-branch", {"anyOf": [{"$ref": "#"}, {"allOf": [{"$ref": "#"}]}]}),
    ("all-of", {"allOf": [{"type": "string"}, {"$ref": "#"}]}),
    ("false", False),
    (
        "required-but-forbidden",
        {"type": "object", "required": ["a"], "additionalProperties": False},
    ),
]

POSSIBLE: list[tuple[str, Any]] = [
    ("optional-self", NODE),
    ("nullable-self", {**NODE, "required": ["next"], "type": ["object", "null"]}),
    ("branch-out", {"anyOf": [{"$ref": "#"}, {"type": "integer"}]}),
    ("empty-array", {"type": "array", "items": {"$ref": "#"}}),
    (
        "linked-list",
        {
            "$defs": {
                "L": {
                    "anyOf": [
                        {"type": "null"},
                        {
                            "type": "object",
                            "properties": {"tail": {"$ref": "#/$defs/L"}},
                            "required": ["tail"],
                        },
                    ]
                }
            },
            "$ref": "#/$defs/L",
        },
    ),
    ("untyped-properties", {"properties": {"a": {"$ref": "#"}}, "required": ["a"]}),
    ("const", {"$ref": "#/$defs/x", "$defs": {"x": {"const": 1}}}),
    ("dangling", {"$ref": "#/nowhere"}),  # llguidance names the missing pointer
    ("anchor", {"$ref": "#here"}),
    ("remote", {"$ref": "https://example.com/schema.json"}),
    (
        "sub-resource",
        {"type": "object", "required": ["a"], "properties": {"a": {"$id": "other", "$ref": "#"}}},
    ),
    (
        "pattern-properties",
        {"type": "object", "required": ["a"], "patternProperties": {"^a$": {"$ref": "#"}}},
    ),
    ("escaped-pointer", {"$defs": {"a/b~c": {"type": "string"}}, "$ref": "#/$defs/a~1b~0c"}),
    ("plain", {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
]


@pytest.mark.parametrize("schema", [c[1] for c in IMPOSSIBLE], ids=[c[0] for c in IMPOSSIBLE])
def test_a_schema_that_must_contain_itself_has_no_finite_instance(schema: Any) -> None:
    assert not has_finite_instance(schema)


@pytest.mark.parametrize("schema", [c[1] for c in POSSIBLE], ids=[c[0] for c in POSSIBLE])
def test_recursion_with_a_way_out_and_unreadable_schemas_pass(schema: Any) -> None:
    assert has_finite_instance(schema)


def chain(length: int, end: Any) -> dict[str, Any]:
    """D0 requires D1 ... requires D{length-1}, which is `end`."""
    defs: dict[str, Any] = {
        f"D{i}": {
            "type": "object",
            "properties": {"x": {"$ref": f"#/$defs/D{i + 1}"}},
            "required": ["x"],
        }
        for i in range(length - 1)
    }
    defs[f"D{length - 1}"] = end
    return {"$defs": defs, "$ref": "#/$defs/D0"}


def test_long_reference_chains_are_followed_to_their_end() -> None:
    assert has_finite_instance(chain(3000, {"type": "integer"}))
    assert not has_finite_instance(chain(3000, {"$ref": "#"}))


def test_a_schema_too_costly_to_check_counts_as_satisfiable() -> None:
    # Impossible (X requires itself), but each round shows one more D satisfiable (the last
    # first): some 4.5M visits before the answer, past the budget, so the check gives up.
    defs: dict[str, Any] = {
        f"D{i}": {"anyOf": [{"$ref": f"#/$defs/D{i + 1}"}]} for i in range(3000)
    }
    defs["D3000"] = {"type": "integer"}
    defs["X"] = {"$ref": "#/$defs/X"}
    schema = {"$defs": defs, "allOf": [{"$ref": "#/$defs/D0"}, {"$ref": "#/$defs/X"}]}
    assert has_finite_instance(schema)
    defs.update({f"D{i}": {"type": "integer"} for i in range(3000)})
    assert not has_finite_instance(schema)  # cheap: the same verdict without the budget
