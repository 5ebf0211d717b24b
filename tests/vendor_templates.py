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
  DeepSeek-V3.1.jinja        models/templates/deepseek-ai-DeepSeek-V3.1.jinja
                             commit 0374c5b6e4c19370262d93e2c3f2a98c9af9fe1f
  NVIDIA-Nemotron-Nano-v2.jinja  models/templates/NVIDIA-Nemotron-Nano-v2.jinja
                             commit 5801ed3557edfdfcd7d14e0821bf8adefdf1aaf1
  ByteDance-Seed-OSS.jinja   models/templates/ByteDance-Seed-OSS.jinja
                             commit b1933d306f928b19e1601e640c4f1a2eb84b238a
  MiniMax-M2.jinja           models/templates/unsloth-MiniMax-M2.jinja
                             commit a21f05affbf67c90f2ac574f1bdd7197ccbe2369
  command-r7b-12-2024-tool_use.jinja
                             models/templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja
                             commit 041462bd55ae7be3ddfbd7a7356f01715740c50d
  DeepSeek-R1-Distill-Qwen-32B.jinja
                             models/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
                             commit 20bdc4fac4e8779e5b73646f4b3b24a9964aa566
  Mistral-Small-3.1-24B-Instruct-2503.jinja
                             models/templates/mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja
                             commit 9190da2208fbaa161e10f5f0f9ab437faeacba13
  Kimi-K2-Thinking.jinja     models/templates/moonshotai-Kimi-K2-Thinking.jinja
                             commit 0c3c896ea80643608b4e961eec7e1efcd844e109
  gemma4.jinja               models/templates/gemma4.jinja
                             commit 75f1ba7389067a9f90082515e124c377a1e104b2
The next ones are not in the index's copy of ggml-org/llama.cpp; they were read from forks
that keep the same models/templates/ files:
  Hermes-3-Llama-3.1-8B-tool_use.jinja  ye-NX/llama.cpp
                             models/templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja
                             commit b354d7c9ecb76c97c07098617cdebbdfffa2583e (CRLF line ends)
  granite-3.3-2B-Instruct.jinja  ye-NX/llama.cpp
                             models/templates/ibm-granite-granite-3.3-2B-Instruct.jinja
                             commit b354d7c9ecb76c97c07098617cdebbdfffa2583e (CRLF line ends)
  Llama-3.3-70B-Instruct.jinja  ye-NX/llama.cpp
                             models/templates/meta-llama-Llama-3.3-70B-Instruct.jinja
                             commit b354d7c9ecb76c97c07098617cdebbdfffa2583e (CRLF line ends;
                             Llama 3.1's template: JSON calls, <|python_tag|> for built-in tools)
  Qwen3.5-4B.jinja           HermestoAizales/llama.cpp models/templates/Qwen3.5-4B.jinja
                             commit 0834e65824bc751ebb66596dbc2b6119687d2749
  Qwen3-0.6B.jinja           ye-NX/llama.cpp models/templates/Qwen-Qwen3-0.6B.jinja
                             commit b354d7c9ecb76c97c07098617cdebbdfffa2583e (CRLF line ends)
  Llama-3.2-3B-Instruct.jinja  ye-NX/llama.cpp
                             models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja
                             commit b354d7c9ecb76c97c07098617cdebbdfffa2583e (CRLF line ends)
  gpt-oss-120b.jinja         ye-NX/llama.cpp models/templates/openai-gpt-oss-120b.jinja
                             commit b354d7c9ecb76c97c07098617cdebbdfffa2583e (CRLF line ends)
  Mistral-Small-3.2-24B-Instruct-2506.jinja  ye-NX/llama.cpp
                             models/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja
                             commit b354d7c9ecb76c97c07098617cdebbdfffa2583e (CRLF line ends)
  command-r-plus-tool_use.jinja  ye-NX/llama.cpp
                             models/templates/CohereForAI-c4ai-command-r-plus-tool_use.jinja
                             commit b354d7c9ecb76c97c07098617cdebbdfffa2583e (CRLF line ends)
  Qwen3-Coder.jinja          wbpxre150/llama.cpp models/templates/Qwen3-Coder.jinja
                             commit 90dd63ae86bdad1b4bb6de69379956b0ae1189bf
"""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


def vendor_template(name: str) -> str:
    """The template text of tests/templates/`name`.jinja, byte for byte."""
    return (TEMPLATES / f"{name}.jinja").read_bytes().decode("utf-8")
