"""A token trie for the prefix cache: mlx-lm's PromptTrie interface and answers, with a
look-up that costs the prompt's length, not the number of entries.

mlx-lm's `PromptTrie.search` finds the shortest stored sequence extending the common prefix
by walking every node below the point where the prompt departs: with many stored prompts
sharing a chat template's first tokens, that is every token of every one of them (measured:
11 ms a look-up with 200 entries of ~280 tokens, on the engine thread, once per admitted
request). Here each node knows how far below it the nearest stored sequence ends, so that
search walks one path down.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

_NONE = object()  # a node that ends no stored sequence
_FAR = 1 << 62  # `nearest` of a node with nothing stored at or below it


@dataclass(slots=True, eq=False)
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    value: Any = _NONE
    nearest: int = _FAR  # tokens from here to the nearest stored sequence's end, 0: here

    def refresh(self) -> None:
        if self.value is not _NONE:
            self.nearest = 0
        else:
            self.nearest = 1 + min((c.nearest for c in self.children.values()), default=_FAR)


# What one node costs in memory: the node, its children dict (one entry, as most have) and
# the int object of the token it is keyed by (ids past 256 are not shared).
NODE_BYTES = sys.getsizeof(_Node()) + sys.getsizeof({0: None}) + 32


@dataclass(frozen=True, slots=True)
class TrieResult:
    """As mlx-lm's PromptTrieResult: `exact` the tokens if stored; `shorter` the longest
    stored prefix (of more than one token); `longer` the shortest stored sequence extending
    the `common_prefix` tokens the prompt shares with anything stored."""

    exact: list[int] | None
    shorter: list[int] | None
    longer: list[int] | None
    common_prefix: int


class PromptTrie:
    """Values keyed by (model, token sequence). `nodes` counts the nodes below the roots: one
    per token not shared with a stored sequence's prefix (NODE_BYTES each)."""

    def __init__(self) -> None:
        self._roots: dict[Any, _Node] = {}
        self.nodes = 0

    def add(self, model: Any, tokens: list[int], value: Any) -> Any:
        """Store `value` under `tokens`; returns the value it replaced (None if none)."""
        path = [self._roots.setdefault(model, _Node())]
        for tok in tokens:
            child = path[-1].children.get(tok)
            if child is None:
                child = path[-1].children[tok] = _Node()
                self.nodes += 1
            path.append(child)
        prev, path[-1].value = path[-1].value, value
        for depth, node in enumerate(reversed(path)):
            node.nearest = min(node.nearest, depth)
        return None if prev is _NONE else prev

    def get(self, model: Any, tokens: list[int]) -> Any:
        node = self._roots[model]
        for tok in tokens:
            node = node.children[tok]
        if node.value is _NONE:
            raise KeyError(tuple(tokens))
        return node.value

    def pop(self, model: Any, tokens: list[int]) -> Any:
        """Remove and return the value under `tokens` (KeyError if none), and the nodes
        that no longer lead to any."""
        path = self._path(model, tokens)
        node = path[-1]
        if node.value is _NONE:
            raise KeyError(tuple(tokens))
        value, node.value = node.value, _NONE
        for i in range(len(tokens), 0, -1):
            if path[i].value is not _NONE or path[i].children:
                break
            del path[i - 1].children[tokens[i - 1]]
            self.nodes -= 1
        self._refresh(path)
        return value

    def pop_prefixes(self, model: Any, tokens: list[int]) -> list[tuple[int, Any]]:
        """Remove the values stored under proper prefixes of `tokens` (which must lead to a
        stored node); returns (prefix length, value) for each, shortest first."""
        path = self._path(model, tokens)
        values = []
        for i, node in enumerate(path[:-1]):
            if node.value is not _NONE:
                values.append((i, node.value))
                node.value = _NONE
        self._refresh(path)
        return values

    def search(self, model: Any, tokens: list[int]) -> TrieResult:
        node = self._roots.get(model)
        if node is None:
            return TrieResult(None, None, None, 0)
        if not tokens and node.value is not _NONE:
            return TrieResult([], None, None, 0)
        last, index = -1, 0
        while index < len(tokens) and tokens[index] in node.children:
            node = node.children[tokens[index]]
            if node.value is not _NONE:
                last = index
            index += 1
        if last == len(tokens) - 1 >= 0:
            return TrieResult(tokens, None, None, 0)
        shorter = tokens[: last + 1] if last > 0 else None
        longer = None
        if index > 0 and node.nearest < _FAR:
            extra = []
            while node.value is _NONE:  # down towards the nearest stored end
                tok, node = min(node.children.items(), key=lambda kv: kv[1].nearest)
                extra.append(tok)
            longer = tokens[:index] + extra
        return TrieResult(None, shorter, longer, index)

    def _path(self, model: Any, tokens: list[int]) -> list[_Node]:
        path = [self._roots[model]]
        for tok in tokens:
            path.append(path[-1].children[tok])
        return path

    @staticmethod
    def _refresh(path: list[_Node]) -> None:
        for node in reversed(path):
            node.refresh()
