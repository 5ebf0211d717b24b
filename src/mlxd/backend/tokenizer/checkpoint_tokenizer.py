"""A checkpoint's tokenizer loaded through `tokenizers` alone (importing transformers costs
most of a second of start-up).

`tokenizer_route(path)` says how a checkpoint's tokenizer loads: "tokenizers" where
transformers itself would build its generic `TokenizersBackend` (PreTrainedTokenizerFast) straight
from tokenizer.json, else "transformers" with the reason (no tokenizer.json, a model-specific or
custom tokenizer class, remote code, legacy files). `CheckpointTokenizer` then gives what mlxd
and mlx-lm's TokenizerWrapper and streaming detokenizers use of a transformers tokenizer, built by
the same steps from the same files, so ids and text are the same (tests/integration/backend/
tokenizer/test_checkpoint_tokenizer.py compares them on every test checkpoint and the demo model).
Reads JSON only at import; `tokenizers` is imported when a tokenizer loads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from mlxd.checkpoint import read_json_object

if TYPE_CHECKING:
    from types import ModuleType

    from tokenizers import AddedToken, Tokenizer

__all__ = ["CheckpointTokenizer", "TokenizerLoader", "TokenizerRoute", "tokenizer_route"]

# transformers' generic fast-tokenizer class names: it loads these from tokenizer.json unchanged.
GENERIC_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})
# Model types for which transformers 5 replaces a declared generic class with its own class
# (MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS entries with a model-specific tokenizer; the
# pinned-version test checks this set against the installed transformers).
OWN_CLASS_MODEL_TYPES = frozenset(
    {
        "hyperclovax_vision_v2",
        "qwen2",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "qwen4_exp",
        "siglip2",
    }
)
# transformers' named special tokens, in its order.
SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
VERY_LARGE_INTEGER = int(1e30)  # transformers' model_max_length when the config has none


class TokenizerLoader(StrEnum):
    TOKENIZERS = "tokenizers"  # CheckpointTokenizer: tokenizer.json through `tokenizers`
    TRANSFORMERS = "transformers"  # transformers' AutoTokenizer (mlx-lm's own path)


@dataclass(frozen=True, slots=True)
class TokenizerRoute:
    loader: TokenizerLoader
    reason: str | None = None  # why transformers is needed

    def describe(self) -> str:
        return self.loader.value + (f" ({self.reason})" if self.reason else "")


def tokenizer_route(path: Path, *, trust_remote_code: bool = False) -> TokenizerRoute:
    """How the tokenizer in checkpoint directory `path` loads (reads JSON only, never raises)."""
    reason = _needs_transformers(Path(path), trust_remote_code)
    if reason is None:
        return TokenizerRoute(TokenizerLoader.TOKENIZERS)
    return TokenizerRoute(TokenizerLoader.TRANSFORMERS, reason)


def _needs_transformers(path: Path, trust_remote_code: bool) -> str | None:
    if not (path / "tokenizer.json").is_file():
        return "no tokenizer.json"
    if trust_remote_code:
        return "trust_remote_code: the model's code may define its tokenizer"
    config = read_json_object(path / "tokenizer_config.json")
    model_config = read_json_object(path / "config.json")
    declared = config.get("tokenizer_class") or model_config.get("tokenizer_class")
    if "auto_map" in config:
        return "custom tokenizer code (auto_map)"
    if declared not in GENERIC_CLASSES:
        return f"tokenizer class {declared}" if declared else "no tokenizer_class"
    for key in ("model_type", "model_name"):
        if model_config.get(key) in OWN_CLASS_MODEL_TYPES:
            return f"transformers uses its own tokenizer class for {model_config[key]}"
    if "fast_tokenizer_files" in config:
        return "versioned tokenizer files (fast_tokenizer_files)"
    if (path / "added_tokens.json").exists() and not _restates_added_tokens(path):
        return "added_tokens.json with tokens tokenizer.json does not add at those ids"
    if "added_tokens_decoder" not in config and (path / "special_tokens_map.json").exists():
        return "legacy special_tokens_map.json"
    if config.get("split_special_tokens"):
        return "split_special_tokens"
    if config.get("clean_up_tokenization_spaces") and _model_type(path) != "BPE":
        return "clean_up_tokenization_spaces"
    if not all(_is_token(config.get(k)) for k in SPECIAL_TOKEN_NAMES):
        return "special tokens in a form transformers converts itself"
    extra = _tokens_in(_extra_special_tokens(config))
    if extra is None or not all(_is_token(t) and t is not None for t in extra):
        return "extra_special_tokens in a form transformers converts itself"
    if not all(_valid_entry(t) for t in _declared_entries(config)):
        return "added_tokens_decoder in a form transformers converts itself"
    return None


def _restates_added_tokens(path: Path) -> bool:
    """added_tokens.json names only tokens tokenizer.json adds, at the same ids (what
    save_pretrained writes beside it): transformers then adds nothing."""
    listed = read_json_object(path / "added_tokens.json")
    known = _tokenizer_json_added(path)
    return known is not None and all(known.get(t) == i for t, i in listed.items())


def _tokenizer_json_added(path: Path) -> dict[str, int] | None:
    """tokenizer.json's added tokens (content -> id) from the head of the file, where its
    writer puts them (parsing the whole vocabulary would cost what this route saves)."""
    with open(path / "tokenizer.json", encoding="utf-8", errors="replace") as f:
        head = f.read(1 << 20)
    key = head.find('"added_tokens"')
    try:
        entries, _ = (
            json.JSONDecoder().raw_decode(head, head.index("[", key)) if key >= 0 else (0, 0)
        )
    except ValueError:
        return None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return None
    return {str(e.get("content")): e.get("id") for e in entries}


class CheckpointTokenizer:
    """tokenizer.json + tokenizer_config.json + chat templates, as transformers 5 assembles them
    for a generic fast tokenizer; the subset of its API that mlxd and mlx-lm use."""

    def __init__(self, path: Path, transformers: Callable[[], ModuleType] | None = None) -> None:
        """`transformers` imports transformers for `apply_chat_template` (the loader passes
        lazy_transformers.real_transformers; without it the method raises)."""
        from tokenizers import Tokenizer

        path = Path(path)
        config = read_json_object(path / "tokenizer_config.json")
        self.name_or_path = str(path)
        self.init_kwargs: dict[str, Any] = dict(config)  # mlx-lm reads its own keys here
        self.chat_template = _chat_template(path, config)
        limit = config.get("model_max_length", config.get("max_len"))
        self.model_max_length: int = limit if limit is not None else VERY_LARGE_INTEGER
        self._backend: Tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._backend.no_truncation()  # transformers' encode() turns both off per call
        self._backend.no_padding()
        self._special = _add_tokens(self._backend, path, config)
        self._import_transformers = transformers
        self._transformers: Any = None  # transformers' tokenizer, for apply_chat_template only
        self._vocab: dict[str, int] | None = None

    # ---- special tokens ------------------------------------------------------------

    def _named(self, name: str) -> str | None:
        value = self._special.get(name)
        return None if value is None else str(value)

    @property
    def bos_token(self) -> str | None:
        return self._named("bos_token")

    @property
    def eos_token(self) -> str | None:
        return self._named("eos_token")

    @property
    def unk_token(self) -> str | None:
        return self._named("unk_token")

    @property
    def pad_token(self) -> str | None:
        return self._named("pad_token")

    @property
    def bos_token_id(self) -> int | None:
        return self._token_id(self.bos_token)

    @property
    def eos_token_id(self) -> int | None:
        return self._token_id(self.eos_token)

    @property
    def unk_token_id(self) -> int | None:
        return self._token_id(self.unk_token)

    @property
    def pad_token_id(self) -> int | None:
        return self._token_id(self.pad_token)

    def _token_id(self, token: str | None) -> int | None:
        return None if token is None else self.convert_tokens_to_ids(token)

    # ---- text <-> ids ---------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, token_ids: int | Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else [int(t) for t in token_ids]
        return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)

    @overload
    def convert_ids_to_tokens(self, ids: int) -> str | None: ...
    @overload
    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str | None]: ...
    def convert_ids_to_tokens(self, ids: int | Iterable[int]) -> str | None | list[str | None]:
        if isinstance(ids, int):
            return self._backend.id_to_token(ids)
        return [self._backend.id_to_token(int(i)) for i in ids]

    @overload
    def convert_tokens_to_ids(self, tokens: str) -> int | None: ...
    @overload
    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int | None]: ...
    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | None | list[int | None]:
        if isinstance(tokens, str):
            index = self._backend.token_to_id(tokens)
            return index if index is not None else self.unk_token_id
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        """transformers' own, from a transformers tokenizer loaded on first use. mlxd renders
        templates in its sandbox (mlxd.chat.template) and never calls this."""
        if self._transformers is None:
            if self._import_transformers is None:
                raise NotImplementedError("this tokenizer was loaded without transformers")
            auto = self._import_transformers().AutoTokenizer
            self._transformers = auto.from_pretrained(self.name_or_path)
        return self._transformers.apply_chat_template(*args, **kwargs)

    # ---- vocabulary -----------------------------------------------------------------

    def get_vocab(self) -> dict[str, int]:
        """A copy each call; the backend builds the dict once (mlx-lm asks three times)."""
        if self._vocab is None:
            self._vocab = self._backend.get_vocab(with_added_tokens=True)
        return dict(self._vocab)

    @property
    def vocab(self) -> dict[str, int]:
        return self.get_vocab()

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        return self._backend.get_added_tokens_decoder()

    def get_added_vocab(self) -> dict[str, int]:
        """Added tokens' text -> id, in id order."""
        return {token.content: i for i, token in sorted(self.added_tokens_decoder.items())}

    @property
    def backend_tokenizer(self) -> Tokenizer:
        return self._backend

    @property
    def vocab_size(self) -> int:
        """Without the added tokens, as transformers counts it."""
        return self._backend.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def __repr__(self) -> str:
        return f"CheckpointTokenizer({self.name_or_path!r}, vocab={len(self)})"


# ---- transformers' added-token steps (TokenizersBackend.__init__), in its order --------------


def _add_tokens(backend: Tokenizer, path: Path, config: dict[str, Any]) -> dict[str, object]:
    """Add to `backend` the tokens transformers adds; return the named special tokens
    (bos_token, ..., then model-specific `*_token` entries) as str or AddedToken."""
    from tokenizers import processors

    if "added_tokens_decoder" in config:
        entries = sorted((int(i), t) for i, t in config["added_tokens_decoder"].items())
    else:  # transformers then takes tokenizer.json's own list
        entries = [
            (t.pop("id"), t) for t in read_json_object(path / "tokenizer.json")["added_tokens"]
        ]
    declared = [_added_token(entry) for _, entry in entries]
    special, extra = _special_tokens(config, {str(t): t for t in declared})
    # Every declared token is added again (transformers compares them with ids, never equal),
    # then each special token whose text is not among the backend's added tokens yet.
    to_add: list[object] = list(declared)
    known = [*_added_contents(backend), *(str(t) for t in declared)]
    for value in [*special.values(), *extra]:
        if value is not None and str(value) not in known and value not in to_add:
            to_add.append(value)
    named = [str(v) for v in special.values() if v]
    tokens = [_as_added(item, named) for item in to_add]
    if tokens:
        backend.add_tokens(tokens)
    if backend.post_processor is None:  # transformers installs an empty template
        backend.post_processor = processors.TemplateProcessing(
            single="$A:0", pair="$A:0 $B:1", special_tokens=[]
        )
    return special


def _special_tokens(
    config: dict[str, Any], declared: dict[str, AddedToken]
) -> tuple[dict[str, object], list[object]]:
    """Named special tokens (mapped to their declared AddedToken), then model-specific ones
    (serialized AddedTokens first, then strings, then a dict of extra_special_tokens); and the
    list of extra special tokens."""
    special: dict[str, object] = {}
    for key in SPECIAL_TOKEN_NAMES:
        value = _token(config.get(key))
        if value is not None:
            special[key] = declared.get(str(value), value)
    others = [(k, v) for k, v in config.items() if k.endswith("_token")]
    others = [(k, v) for k, v in others if k not in SPECIAL_TOKEN_NAMES]
    special.update((k, _token(v)) for k, v in others if _is_serialized(v))
    special.update((k, v) for k, v in others if isinstance(v, str))
    extra = _extra_special_tokens(config)
    if isinstance(extra, dict):
        special.update((k, _token(v)) for k, v in extra.items())
        return special, []
    return special, [_token(t) for t in extra] if isinstance(extra, list) else []


def _as_added(item: object, named: list[str]) -> AddedToken:
    from tokenizers import AddedToken

    if isinstance(item, str):
        return AddedToken(item, special=True)
    assert isinstance(item, AddedToken)
    if not item.special and str(item) in named:
        item.special = True
    return item


def _added_token(entry: dict[str, Any]) -> AddedToken:
    from tokenizers import AddedToken

    return AddedToken(**entry)


def _added_contents(backend: Tokenizer) -> list[str]:
    decoder = backend.get_added_tokens_decoder()
    return [decoder[i].content for i in sorted(decoder)]


def _token(value: object) -> object:
    """A token entry of tokenizer_config.json: a string, None or a serialized AddedToken."""
    if _is_serialized(value):
        assert isinstance(value, dict)
        return _added_token({k: v for k, v in value.items() if k != "__type"})
    return value


def _is_serialized(value: object) -> bool:
    return isinstance(value, dict) and value.get("__type") == "AddedToken"


def _is_token(value: object) -> bool:
    return value is None or isinstance(value, str) or _is_serialized(value)


_ADDED_TOKEN_FIELDS = frozenset(
    {"content", "single_word", "lstrip", "rstrip", "normalized", "special"}
)


def _declared_entries(config: dict[str, Any]) -> list[object]:
    declared = config.get("added_tokens_decoder", {})
    if not isinstance(declared, dict) or not all(str(i).isdigit() for i in declared):
        return [None]
    return list(declared.values())


def _valid_entry(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("content"), str)
        and set(entry) <= _ADDED_TOKEN_FIELDS
    )


def _extra_special_tokens(config: dict[str, Any]) -> object:
    extra = config.get("extra_special_tokens")
    if not extra and "additional_special_tokens" in config:
        extra = config["additional_special_tokens"]
    return [] if extra is None else extra


def _tokens_in(extra: object) -> list[object] | None:
    """The token entries of an extra_special_tokens list or dict (None: neither)."""
    if isinstance(extra, dict):
        return list(extra.values())
    return list(extra) if isinstance(extra, list) else None


def _chat_template(path: Path, config: dict[str, Any]) -> str | dict[str, str] | None:
    """transformers' order: chat_template.jinja and additional_chat_templates/*.jinja files
    replace the config's template; several templates make a dict keyed by name."""
    templates: dict[str, str] = {}
    default = path / "chat_template.jinja"
    if default.is_file():
        templates["default"] = default.read_text(encoding="utf-8")
    extra_dir = path / "additional_chat_templates"
    if extra_dir.is_dir():
        for file in extra_dir.glob("*.jinja"):
            templates[file.name.removesuffix(".jinja")] = file.read_text(encoding="utf-8")
    if list(templates) == ["default"]:
        return templates["default"]
    if templates:
        return templates
    template = config.get("chat_template")
    if isinstance(template, list | tuple):
        return {t["name"]: t["template"] for t in template}
    return template if isinstance(template, str | dict) else None


def _model_type(path: Path) -> object:
    return (read_json_object(path / "tokenizer.json").get("model") or {}).get("type")
