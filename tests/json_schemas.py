"""JSON schemas for structured-output tests: a hypothesis strategy and a checker for its subset.

The strategy draws objects (required fields, no extra properties), arrays, enums, consts,
nested values, integers and numbers with bounds, booleans, null, and strings with lengths or
patterns. Every string and array is bounded, so even a random-weight model (which picks among
the allowed tokens almost uniformly) finishes its answer in a few hundred tokens.
`check(value, schema)` validates a value against any schema the strategy draws (the tests
carry no JSON-schema library); it raises AssertionError naming the path that fails.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import strategies as st

# The object schemas the API tests constrain with: a tool's arguments and an answer.
ZONE_ARGS: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
    "required": ["zone"],
    "additionalProperties": False,
}
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}
PATTERNS = ("^[a-z]{1,6}$", "^[0-9]{3}-[0-9]{2}$", "^(yes|no|maybe)$", "^[A-Z][a-z]{0,4}$")
_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", min_size=1, max_size=6)


@st.composite
def _integer(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.integers(-1000, 1000))
    return {"type": "integer", "minimum": low, "maximum": low + draw(st.integers(0, 5000))}


@st.composite
def _number(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.integers(-100, 100))
    return {"type": "number", "minimum": low, "maximum": low + draw(st.integers(1, 100))}


@st.composite
def _string(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"type": "string", "pattern": draw(st.sampled_from(PATTERNS))}
    low = draw(st.integers(0, 3))
    return {"type": "string", "minLength": low, "maxLength": low + draw(st.integers(0, 8))}


LEAVES = st.one_of(
    _integer(),
    _number(),
    _string(),
    st.lists(_WORDS, min_size=1, max_size=5, unique=True).map(lambda v: {"enum": v}),
    st.lists(st.integers(-9, 99), min_size=1, max_size=4, unique=True).map(lambda v: {"enum": v}),
    _WORDS.map(lambda v: {"const": v}),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
)


def _containers(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def obj(draw: st.DrawFn) -> dict[str, Any]:
        props = draw(st.dictionaries(_NAMES, children, min_size=1, max_size=4))
        required = [k for k in props if draw(st.booleans())]
        schema: dict[str, Any] = {"type": "object", "properties": props}
        schema["additionalProperties"] = False
        if required:
            schema["required"] = required
        return schema

    @st.composite
    def arr(draw: st.DrawFn) -> dict[str, Any]:
        low = draw(st.integers(0, 2))
        high = low + draw(st.integers(0, 2))
        return {"type": "array", "items": draw(children), "minItems": low, "maxItems": high}

    return st.one_of(obj(), arr())


SCHEMAS = st.recursive(LEAVES, _containers, max_leaves=6)
OBJECT_SCHEMAS = _containers(SCHEMAS).filter(lambda s: s["type"] == "object")


def check(value: Any, schema: dict[str, Any], path: str = "$") -> None:
    """Assert `value` is valid against `schema` (the subset SCHEMAS draws)."""
    if "const" in schema:
        assert value == schema["const"], f"{path}: {value!r} != const {schema['const']!r}"
        return
    if "enum" in schema:
        assert value in schema["enum"] and not isinstance(value, bool), f"{path}: not in enum"
        return
    kind = schema.get("type")
    if kind == "object":
        _check_object(value, schema, path)
    elif kind == "array":
        assert isinstance(value, list), f"{path}: not an array"
        assert schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", 1 << 30), path
        for i, item in enumerate(value):
            check(item, schema["items"], f"{path}[{i}]")
    elif kind in ("integer", "number"):
        ok = isinstance(value, int) if kind == "integer" else isinstance(value, int | float)
        assert ok and not isinstance(value, bool), f"{path}: {value!r} is not an {kind}"
        assert schema["minimum"] <= value <= schema["maximum"], f"{path}: {value} out of bounds"
    elif kind == "string":
        _check_string(value, schema, path)
    elif kind == "boolean":
        assert isinstance(value, bool), f"{path}: not a boolean"
    elif kind == "null":
        assert value is None, f"{path}: not null"
    else:
        raise AssertionError(f"{path}: the checker does not know {schema}")


def _check_object(value: Any, schema: dict[str, Any], path: str) -> None:
    assert isinstance(value, dict), f"{path}: not an object"
    props = schema.get("properties", {})
    for key in schema.get("required", []):
        assert key in value, f"{path}: missing required {key!r}"
    if schema.get("additionalProperties") is False:
        extra = set(value) - set(props)
        assert not extra, f"{path}: unexpected properties {sorted(extra)}"
    for key, item in value.items():
        if key in props:
            check(item, props[key], f"{path}.{key}")


def _check_string(value: Any, schema: dict[str, Any], path: str) -> None:
    assert isinstance(value, str), f"{path}: not a string"
    if "pattern" in schema:
        assert re.search(schema["pattern"], value), f"{path}: {value!r} !~ {schema['pattern']}"
    low, high = schema.get("minLength", 0), schema.get("maxLength", 1 << 30)
    assert low <= len(value) <= high, f"{path}: length {len(value)} not in [{low}, {high}]"
