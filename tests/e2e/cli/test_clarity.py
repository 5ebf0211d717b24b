"""The CLI says what happened (issue 11, item 10): no chat template, tools a template drops,
and a huge stdin prompt gets the context message, not a template-budget one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.checkpoints import CHATML_TEMPLATE
from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd

TOOLS = json.dumps(
    [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
)
# ChatML without the tools block: a template that cannot show tools to the model.
NO_TOOLS_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_model_without_template_says_so(tiny_base_model: Path, cli_env: dict[str, str]) -> None:
    proc = run_mlxd("run", str(tiny_base_model), "hi", "--max-tokens", "2", "--json", env=cli_env)
    assert proc.returncode == 0, proc.stderr
    warnings = one_json_line(proc.stdout)["warnings"]
    assert any("no chat template" in w for w in warnings), warnings
    plain = run_mlxd("run", str(tiny_base_model), "hi", "--max-tokens", "2", env=cli_env)
    assert "no chat template" in plain.stderr


def test_tools_a_template_cannot_render_are_reported(
    tiny_chat_model: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    model = shutil.copytree(tiny_chat_model, tmp_path / "no-tools")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = NO_TOOLS_TEMPLATE
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    args = ("hi", "--max-tokens", "2", "--json", "--tools", TOOLS)
    dropped = one_json_line(run_mlxd("run", str(model), *args, env=cli_env).stdout)["warnings"]
    assert any("get_weather" in w and "tools" in w for w in dropped), dropped
    shown = one_json_line(run_mlxd("run", str(tiny_chat_model), *args, env=cli_env).stdout)
    assert shown["warnings"] == []  # its template renders the tools: nothing to say
    assert "tools" in CHATML_TEMPLATE


def test_huge_stdin_gets_the_context_message(
    tiny_chat_model: Path, cli_env: dict[str, str]
) -> None:
    prompt = "word " * (2 << 20)  # 10 MiB: over the template output budget (8 MiB)
    proc = run_mlxd("run", str(tiny_chat_model), "-", "--json", env=cli_env, input=prompt)
    assert proc.returncode == 2, proc.stderr
    message = json.loads(proc.stderr)["error"]["message"]
    assert "template" not in message and "context" in message, message
