"""Vendors' real chat templates, stored verbatim under tests/templates/ as test fixtures.

Every file was read from ggml-org/llama.cpp (models/templates/, which keeps the templates the
vendors ship in their tokenizer_config.json):
  LFM2.5-8B-A1B.jinja        models/templates/LFM2.5-8B-A1B.jinja
                             commit 6f4e9f581c7b0a59a1caf901b18434641494c5f1
  Phi-4-mini-instruct.jinja  models/templates/llama-cpp-microsoft-Phi-4-mini-instruct.jinja
                             commit 6d7822c18b5bc43c0053f09cf0eba66bd7e78a93
  GLM-4.6.jinja              models/templates/GLM-4.6.jinja
                             commit afefa651447358ae477f31a0ea1b97adff04c64f
  Kimi-K2.jinja              models/templates/moonshotai-Kimi-K2.jinja (CRLF line ends, as there)
                             commit 02f4a631678bc435c5cea7a54ab4222ee32e8453
"""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


def vendor_template(name: str) -> str:
    """The template text of tests/templates/`name`.jinja, byte for byte."""
    return (TEMPLATES / f"{name}.jinja").read_bytes().decode("utf-8")
