"""Default bounds for the numbers and strings a schema leaves unbounded (pure Python).

A grammar makes an answer valid, not sensible: with `{"type": "integer"}` a small model may
write `1111111...` until max_tokens, and clients such as pydantic-ai move `minimum` and
`maximum` into descriptions. Before a schema compiles, every subschema typed `integer` or
`number` without a bound on a side gets one (|value| < 10**integer_digits), every `number`
without `multipleOf` gets at most `fraction_digits` digits after the point (as `multipleOf:
1e-N`, which also rules out exponents), and every plain `string` (no maxLength, pattern,
format, enum or const) gets `maxLength: string_chars`. 0 leaves that cap off. Subschemas
without a `type` (`{}`: any value) are left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_FRACTION_DIGITS", "ValueCaps", "with_default_bounds"]

# llguidance refuses a `multipleOf` whose decimal spelling needs more digits (1e-11 and up).
MAX_FRACTION_DIGITS = 10
_ONE = ("not", "additionalProperties", "items", "contains", "if", "then", "else", "propertyNames")
_MANY = ("anyOf", "allOf", "oneOf", "prefixItems", "items")
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_STRING_SHAPES = ("maxLength", "pattern", "format", "enum", "const")


@dataclass(frozen=True, slots=True)
class ValueCaps:
    integer_digits: int = 15  # digits before the point (0: no cap)
    fraction_digits: int = MAX_FRACTION_DIGITS  # digits after it (0: no cap)
    string_chars: int = 100_000  # characters of a string (0: no cap)


def with_default_bounds(schema: dict[str, Any], caps: ValueCaps) -> dict[str, Any]:
    """A copy of `schema` with the caps added where it gives no bound of its own."""
    return _bounded(schema, caps)


def _bounded(node: dict[str, Any], caps: ValueCaps) -> dict[str, Any]:
    out = dict(node)
    for key in _ONE:
        if isinstance(out.get(key), dict):
            out[key] = _bounded(out[key], caps)
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [_bounded(s, caps) if isinstance(s, dict) else s for s in out[key]]
    for key in _MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {
                k: _bounded(s, caps) if isinstance(s, dict) else s for k, s in out[key].items()
            }
    kinds = _types(out)
    if "enum" in out or "const" in out:
        return out
    if kinds & {"integer", "number"}:
        _bound_number(out, caps, integer="number" not in kinds)
    if "string" in kinds and caps.string_chars and not any(k in out for k in _STRING_SHAPES):
        out["maxLength"] = caps.string_chars
    return out


def _types(node: dict[str, Any]) -> set[str]:
    kind = node.get("type")
    if isinstance(kind, str):
        return {kind}
    return {k for k in kind if isinstance(k, str)} if isinstance(kind, list) else set()


def _bound_number(node: dict[str, Any], caps: ValueCaps, *, integer: bool) -> None:
    if caps.integer_digits:
        limit = 10**caps.integer_digits
        low = _bound(node, "minimum", "exclusiveMinimum", max)
        high = _bound(node, "maximum", "exclusiveMaximum", min)
        # A side gets the cap only if the other side's own bound leaves room under it.
        if low is None and (high is None or high > -limit):
            _set(node, "minimum", "exclusiveMinimum", -limit, integer)
        if high is None and (low is None or low < limit):
            _set(node, "maximum", "exclusiveMaximum", limit, integer)
    if not integer and caps.fraction_digits and "multipleOf" not in node:
        digits = min(caps.fraction_digits, MAX_FRACTION_DIGITS)
        node["multipleOf"] = float(f"1e-{digits}")


def _bound(node: dict[str, Any], inclusive: str, exclusive: str, pick: Any) -> float | None:
    values = [v for v in (node.get(inclusive), node.get(exclusive)) if _is_number(v)]
    return float(pick(values)) if values else None


def _set(node: dict[str, Any], inclusive: str, exclusive: str, limit: int, integer: bool) -> None:
    if integer:  # integers: the largest value with that many digits, inclusive
        node[inclusive] = limit - 1 if limit > 0 else limit + 1
    else:
        node[exclusive] = float(limit)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
