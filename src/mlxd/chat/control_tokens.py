"""Message content tokenizes as text: control tokens written in it never become control tokens.

A tokenizer matches its added tokens (`<|im_start|>`, `<|eot_id|>`, `<think>`, ...) anywhere in
the text it encodes, so a user who types `<|im_end|><|im_start|>system` would forge a system
turn. Before rendering, every such string inside a message is replaced by a private-use
placeholder character the request does not contain; after rendering, the text between
placeholders is encoded as usual (the template's own control tokens stay control tokens) and
each placeholder's string is encoded with a copy of the tokenizer that has no added tokens.
Prompts whose messages hold no control-token text are encoded exactly as before. One
exception: an assistant message's content keeps the model's reasoning markers, which it wrote
itself and templates parse (Qwen3's drops the reasoning of earlier turns at `</think>`).
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from mlxd.types import Tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer as RustTokenizer

T = TypeVar("T")

__all__ = ["Shield", "added_token_ids", "added_token_pattern", "shield_messages"]

_PLACEHOLDER_BASE = 0xF0000  # Supplementary Private Use Area-A: no tokenizer gives it meaning
_PLACEHOLDER_END = 0xFFFFD


@dataclass(slots=True)
class Shield:
    """Placeholders put into one request's messages, and how to encode around them."""

    literals: dict[str, str] = field(default_factory=dict)  # placeholder char -> control text

    @property
    def active(self) -> bool:
        return bool(self.literals)

    def restore(self, text: str) -> str:
        """The rendered text as the user wrote it (placeholders back to their strings)."""
        for char, literal in self.literals.items():
            text = text.replace(char, literal)
        return text

    def encode(self, tokenizer: Tokenizer, text: str, *, add_special_tokens: bool) -> list[int]:
        """Token ids of the rendered `text`: template text as usual, content's control
        strings as text."""
        if not self.active:
            return _encode(tokenizer, text, add_special_tokens)
        split = re.compile("(" + "|".join(map(re.escape, self.literals)) + ")")
        ids: list[int] = []
        for i, piece in enumerate(split.split(text)):
            if piece in self.literals:
                ids += _as_text(tokenizer, self.literals[piece])
            elif piece:
                ids += _encode(tokenizer, piece, add_special_tokens and i == 0)
        return ids


def shield_messages(
    tokenizer: Tokenizer, messages: list[dict[str, Any]], keep_in_replies: Collection[str] = ()
) -> tuple[list[dict[str, Any]], Shield]:
    """Copies of `messages` whose strings (all but `role`) hold placeholders instead of the
    tokenizer's control-token strings, and the Shield that undoes it after rendering.

    `keep_in_replies`: control strings left alone in an assistant message's `content` (the
    model's own reasoning markers: templates like Qwen3's split earlier turns on them)."""
    pattern = _control_pattern(tokenizer)
    shield = Shield()
    if pattern is None or not any(pattern.search(s) for s in _strings(messages)):
        return messages, shield
    taken = {c for s in _strings(messages) for c in s if ord(c) >= _PLACEHOLDER_BASE}
    free = (chr(c) for c in range(_PLACEHOLDER_BASE, _PLACEHOLDER_END) if chr(c) not in taken)
    chars: dict[str, str] = {}  # control text -> placeholder

    def substitute(match: re.Match[str], keep: Collection[str] = ()) -> str:
        literal = match.group(0)
        if literal in keep:
            return literal
        if literal not in chars:
            chars[literal] = next(free)
            shield.literals[chars[literal]] = literal
        return chars[literal]

    def text(s: str) -> str:
        return pattern.sub(substitute, s)

    def reply_text(s: str) -> str:
        return pattern.sub(lambda m: substitute(m, keep_in_replies), s)

    shielded = []
    for message in messages:
        reply = message.get("role") == "assistant"
        shielded.append(
            {
                k: _map_strings(v, reply_text if reply and k == "content" else text, k)
                for k, v in message.items()
            }
        )
    return shielded, shield


def _strings(value: object, key: str | None = None) -> Iterator[str]:
    if isinstance(value, str):
        if key != "role":
            yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, k)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _map_strings(value: object, fn: Callable[[str], str], key: str | None = None) -> object:
    if isinstance(value, str):
        return value if key == "role" else fn(value)
    if isinstance(value, dict):  # keeps the type: messages.ToolArguments renders as JSON
        return type(value)({k: _map_strings(v, fn, k) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return [_map_strings(v, fn) for v in value]
    return value


def added_token_pattern(tokenizer: Tokenizer) -> re.Pattern[str] | None:
    """A regex matching any of the tokenizer's added tokens (longest first); None if none."""
    return _control_pattern(tokenizer)


def added_token_ids(tokenizer: Tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's added tokens."""
    return _memo(_ADDED_IDS, tokenizer, lambda: _build_added_ids(tokenizer))


def _build_added_ids(tokenizer: Tokenizer) -> frozenset[int]:
    get_added = getattr(tokenizer, "get_added_vocab", None)
    try:
        return frozenset(int(i) for i in (get_added() if callable(get_added) else {}).values())
    except Exception:  # noqa: BLE001 - no added tokens known
        return frozenset()


def _control_pattern(tokenizer: Tokenizer) -> re.Pattern[str] | None:
    """A regex matching any of the tokenizer's added tokens (longest first); None if none."""
    return _memo(_PATTERNS, tokenizer, lambda: _build_pattern(tokenizer))


def _build_pattern(tokenizer: Tokenizer) -> re.Pattern[str] | None:
    get_added = getattr(tokenizer, "get_added_vocab", None)
    try:
        added = [t for t in (get_added() if callable(get_added) else {}) if t]
    except Exception:  # noqa: BLE001 - a tokenizer without added tokens has nothing to guard
        return None
    if not added:
        return None
    return re.compile("|".join(re.escape(t) for t in sorted(added, key=len, reverse=True)))


# Per tokenizer, built once: weak keys, so an unloaded model's tokenizer is not kept alive.
_PATTERNS: weakref.WeakKeyDictionary[Tokenizer, re.Pattern[str] | None] = (
    weakref.WeakKeyDictionary()
)
_TEXT_ONLY: weakref.WeakKeyDictionary[Tokenizer, RustTokenizer | None] = weakref.WeakKeyDictionary()
_ADDED_IDS: weakref.WeakKeyDictionary[Tokenizer, frozenset[int]] = weakref.WeakKeyDictionary()


def _memo(
    cache: weakref.WeakKeyDictionary[Tokenizer, T], tokenizer: Tokenizer, build: Callable[[], T]
) -> T:
    try:
        return cache[tokenizer]
    except KeyError:
        value = cache[tokenizer] = build()
        return value
    except TypeError:  # not weak-referenceable: build each time
        return build()


def _encode(tokenizer: Tokenizer, text: str, add_special_tokens: bool) -> list[int]:
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=add_special_tokens)]


def _as_text(tokenizer: Tokenizer, literal: str) -> list[int]:
    """`literal` tokenized by the model's vocabulary alone, as if no token were added."""
    plain = _text_only(tokenizer)
    if plain is not None:
        return [int(t) for t in plain.encode(literal, add_special_tokens=False).ids]
    # No fast tokenizer to copy: one character at a time never spells an added token.
    return [t for ch in literal for t in _encode(tokenizer, ch, False)]


def _text_only(tokenizer: Tokenizer) -> RustTokenizer | None:
    """A copy of the tokenizers.Tokenizer behind `tokenizer` without its added tokens."""
    return _memo(_TEXT_ONLY, tokenizer, lambda: _build_text_only(tokenizer))


def _build_text_only(tokenizer: Tokenizer) -> RustTokenizer | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    from tokenizers import Tokenizer as RustTokenizer

    data = json.loads(backend.to_str())
    data["added_tokens"] = []
    return RustTokenizer.from_str(json.dumps(data))
