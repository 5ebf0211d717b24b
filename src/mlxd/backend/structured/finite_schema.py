"""has_finite_instance: whether a JSON schema admits a finite JSON value, proven conservatively.

A schema whose every instance must contain another instance of itself (`{"$ref": "#"}`, an
object requiring a property of its own type, an array of at least one of itself) has none:
llguidance compiles it, and the answer either cannot start or can never end. The check is a
least fixed point over local references: a reference is satisfiable once its target is shown
to be without assuming it. Only "#" and "#/json/pointer" references are followed; whatever it
cannot read (other references, sub-resources with an `$id`, too deep, too large) counts as
satisfiable, so it refuses only schemas it proves impossible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

__all__ = ["has_finite_instance"]

_MAX_DEPTH = 64  # deeper sub-schemas count as satisfiable
_MAX_VISITS = 200_000  # sub-schema visits per check, all rounds together
_SCALARS = frozenset({"null", "boolean", "integer", "number", "string"})
_MISSING = object()


class _OutOfBudget(Exception):
    pass


def has_finite_instance(schema: Mapping[str, Any]) -> bool:
    """False only when no finite JSON value can satisfy `schema` (proven, not guessed)."""
    try:
        return _Fixpoint(schema).solve()
    except _OutOfBudget:
        return True


class _Fixpoint:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.refs: dict[str, bool] = {}  # local reference -> shown satisfiable so far
        self.seen: list[str] = []  # the references in the order met (the loop below grows it)
        self.visits = 0

    def solve(self) -> bool:
        while not self.node(self.root, 0):
            changed = False
            i = 0
            while i < len(self.seen):
                ref = self.seen[i]
                i += 1
                if not self.refs[ref]:
                    target = _resolve(self.root, ref)
                    self.refs[ref] = target is _MISSING or self.node(target, 0)
                    changed = changed or self.refs[ref]
            if not changed:
                return False
        return True

    def node(self, schema: object, depth: int) -> bool:
        self.visits += 1
        if self.visits > _MAX_VISITS:
            raise _OutOfBudget
        if isinstance(schema, bool):
            return schema
        if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
            return True
        if depth and "$id" in schema:
            return True  # its references resolve against another base
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and not self.satisfiable(ref):
            return False
        return self.combined(schema, depth + 1) and self.typed(schema, depth + 1)

    def satisfiable(self, ref: str) -> bool:
        if ref not in self.refs:
            self.refs[ref] = False
            self.seen.append(ref)
        return self.refs[ref]

    def combined(self, schema: Mapping[str, Any], depth: int) -> bool:
        every = schema.get("allOf")
        if isinstance(every, list) and not all(self.node(s, depth) for s in every):
            return False
        for key in ("anyOf", "oneOf"):
            some = schema.get(key)
            if isinstance(some, list) and some and not any(self.node(s, depth) for s in some):
                return False
        return True

    def typed(self, schema: Mapping[str, Any], depth: int) -> bool:
        if "const" in schema or "enum" in schema:
            return True  # a literal is finite
        kind = schema.get("type")
        kinds = [kind] if isinstance(kind, str) else kind
        if not isinstance(kinds, list) or not kinds:
            return True  # any type, a scalar among them
        for name in kinds:
            if name == "object" and self.object(schema, depth):
                return True
            if name == "array" and self.array(schema, depth):
                return True
            if name not in ("object", "array"):
                return True  # a scalar (or a type llguidance will refuse itself)
        return False

    def object(self, schema: Mapping[str, Any], depth: int) -> bool:
        required = schema.get("required")
        if not isinstance(required, list):
            return True
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        if schema.get("patternProperties"):
            return True  # which schema a name gets is a regex question
        extra = schema.get("additionalProperties", True)
        names = {name for name in required if isinstance(name, str)}
        return all(self.node(props.get(name, extra), depth) for name in names)

    def array(self, schema: Mapping[str, Any], depth: int) -> bool:
        least = schema.get("minItems", 0)
        if not isinstance(least, int) or least <= 0:
            return True
        prefix = schema.get("prefixItems")
        rest = schema.get("items", True)
        if isinstance(rest, list):  # the older tuple form
            prefix, rest = rest, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        needed = prefix[:least] + ([rest] if least > len(prefix) else [])
        return all(self.node(s, depth) for s in needed)


def _resolve(root: object, ref: str) -> object:
    """The sub-schema a local reference names, or _MISSING (an anchor, a dangling pointer)."""
    pointer = unquote(ref[1:])
    if not pointer:
        return root
    if not pointer.startswith("/"):
        return _MISSING
    node = root
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node
