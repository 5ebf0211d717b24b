"""Grammar libraries compared on mlxd's vocabularies: compile time and mask cost per token.

Prints one JSON object. Runs whichever of llguidance and xgrammar import (xgrammar pulls torch
and transformers, so it is measured from its own venv, never from mlxd's):

    python -m benchmarks.experiments.grammar_libs_bench TOKENIZER_JSON [TOKENIZER_JSON ...]
        [--tokens 400]

For each tokenizer and schema, a matcher walks a token sequence that the grammar accepts (the
tokenizer's own encoding of a valid instance, then a seeded random walk over allowed tokens);
`mask_us` is the time to compute one next-token bitmask (median and p90 over the walk),
`compile_ms` the time from schema to a ready matcher. No mlx, no model: only the libraries.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"},
            "role": {"enum": ["admin", "user", "guest"]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"],
            },
        },
        "required": ["name", "age", "role"],
    },
    "any_object": {"type": "object"},
}

INSTANCES = {
    "person": {
        "name": "Ada Lovelace",
        "age": 36,
        "email": "ada@math.com",
        "role": "admin",
        "tags": ["math", "engines"],
        "address": {"city": "London", "zip": "W1"},
    },
    "any_object": {"weather": {"city": "Paris", "temp": 21.5, "ok": True, "list": [1, 2, 3]}},
}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(samples), 1),
        "p90": round(_pct(samples, 0.9), 1),
        "n": len(samples),
    }


def _allowed(mask_words: Any, vocab: int) -> list[int]:
    out = []
    for w, word in enumerate(mask_words):
        word = int(word) & 0xFFFFFFFF
        while word:
            low = word & -word
            t = w * 32 + low.bit_length() - 1
            if t < vocab:
                out.append(t)
            word ^= low
    return out


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer_json: str, eos: int) -> None:
        import llguidance
        import numpy as np

        self.np = np
        self.ll = llguidance
        t0 = time.perf_counter()
        self.tok = llguidance.LLTokenizer(tokenizer_json, eos_token=eos)
        self.tokenizer_ms = (time.perf_counter() - t0) * 1e3
        self.vocab = self.tok.vocab_size
        self.version = llguidance.get_version() if hasattr(llguidance, "get_version") else ""

    def matcher(self, schema: dict[str, Any]) -> Any:
        grammar = self.ll.LLMatcher.grammar_from_json_schema(schema)
        m = self.ll.LLMatcher(self.tok, grammar)
        assert not m.is_error(), m.get_error()
        return m

    def new_mask(self) -> Any:
        return self.np.full(((self.vocab + 31) // 32,), -1, dtype=self.np.int32)

    def fill(self, m: Any, mask: Any) -> None:
        m.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)

    def consume(self, m: Any, token: int) -> bool:
        return bool(m.consume_token(token))

    def done(self, m: Any) -> bool:
        return bool(m.is_stopped())


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer_json: str, eos: int) -> None:
        import xgrammar
        from tokenizers import Tokenizer

        self.xgr = xgrammar
        t0 = time.perf_counter()
        tk = Tokenizer.from_str(tokenizer_json)
        vocab = tk.get_vocab(with_added_tokens=True)
        encoded = [""] * (max(vocab.values()) + 1)
        for text, i in vocab.items():
            encoded[i] = text
        info = xgrammar.TokenizerInfo(encoded, xgrammar.VocabType.BYTE_LEVEL, stop_token_ids=[eos])
        self.compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.tokenizer_ms = (time.perf_counter() - t0) * 1e3
        self.vocab = len(encoded)
        self.version = getattr(xgrammar, "__version__", "")

    def matcher(self, schema: dict[str, Any]) -> Any:
        return self.xgr.GrammarMatcher(self.compiler.compile_json_schema(json.dumps(schema)))

    def new_mask(self) -> Any:
        return self.xgr.allocate_token_bitmask(1, self.vocab)

    def fill(self, m: Any, mask: Any) -> None:
        m.fill_next_token_bitmask(mask)

    def consume(self, m: Any, token: int) -> bool:
        return bool(m.accept_token(token))

    def done(self, m: Any) -> bool:
        return bool(m.is_terminated())


def walk(lib: Any, schema: dict[str, Any], prefix: list[int], steps: int, seed: int) -> list[float]:
    """Mask times (us) along `prefix`, then along a random walk over allowed tokens."""
    rng = random.Random(seed)
    m = lib.matcher(schema)
    mask = lib.new_mask()
    times: list[float] = []
    for i in range(steps):
        t0 = time.perf_counter()
        lib.fill(m, mask)
        times.append((time.perf_counter() - t0) * 1e6)
        if i < len(prefix):
            token = prefix[i]
        else:
            words = mask.reshape(-1).tolist() if hasattr(mask, "reshape") else list(mask)
            allowed = _allowed(words, lib.vocab)
            if not allowed:
                break
            token = rng.choice(allowed)
        if not lib.consume(m, token) or lib.done(m):
            m = lib.matcher(schema)  # finished an instance: start another
    return times


def measure(lib_cls: Any, path: Path, steps: int) -> dict[str, Any]:
    from tokenizers import Tokenizer

    text = path.read_text()
    tk = Tokenizer.from_str(text)
    eos = tk.token_to_id("<|im_end|>")
    eos = eos if eos is not None else 0
    lib = lib_cls(text, eos)
    out: dict[str, Any] = {
        "version": lib.version,
        "vocab": lib.vocab,
        "tokenizer_ms": round(lib.tokenizer_ms, 1),
    }
    for name, schema in SCHEMAS.items():
        t0 = time.perf_counter()
        lib.matcher(schema)
        compile_ms = (time.perf_counter() - t0) * 1e3
        prefix = tk.encode(json.dumps(INSTANCES[name])).ids
        canonical = walk(lib, schema, prefix, len(prefix), seed=0)
        rand = walk(lib, schema, [], steps, seed=1)
        out[name] = {
            "compile_ms": round(compile_ms, 2),
            "mask_us_canonical": _summary(canonical),
            "mask_us_random_walk": _summary(rand),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tokenizers", nargs="+", type=Path)
    ap.add_argument("--tokens", type=int, default=400, help="random-walk steps per schema")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    for lib_cls in (LLGuidance, XGrammar):
        try:
            per_tok = {str(p): measure(lib_cls, p, args.tokens) for p in args.tokenizers}
        except ImportError as e:
            per_tok = {"skipped": f"not importable: {e}"}
        results[lib_cls.name] = per_tok
    print(json.dumps(results, indent=2))  # no benchmarks.common: xgrammar's venv lacks httpx


if __name__ == "__main__":
    main()
