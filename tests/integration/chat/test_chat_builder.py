"""The request builder on real tokenizers and real chat templates from the tiny checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlxd.chat.builder import build_chat_prompt, build_text_prompt
from mlxd.errors import InvalidRequest, TemplateError
from tests.checkpoints import CHATML_TEMPLATE
from tests.integration.chat.conftest import TOOLS

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]


def test_chat_builder_matches_transformers_rendering(chat_tokenizer):
    """Our sandboxed render gives the same text as HF apply_chat_template for the template."""
    built = build_chat_prompt(chat_tokenizer, MESSAGES, tools=TOOLS)
    hf_messages = json.loads(json.dumps(MESSAGES))
    hf_messages[2]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    expected = chat_tokenizer._tokenizer.apply_chat_template(
        hf_messages, tools=TOOLS, add_generation_prompt=True, tokenize=False
    )
    assert built.text == expected
    assert built.text.endswith("<|im_start|>assistant\n")
    assert "<tool_response>\nsunny\n</tool_response>" in built.text
    assert built.token_ids == chat_tokenizer.encode(built.text, add_special_tokens=False)
    assert built.prompt_tokens == len(built.token_ids)
    assert chat_tokenizer.decode(built.token_ids) == built.text
    assert not built.reasoning_open


def test_chat_builder_template_kwargs_reach_the_template(chat_tokenizer):
    msgs = [{"role": "user", "content": "hi"}]
    off = build_chat_prompt(chat_tokenizer, msgs, template_kwargs={"enable_thinking": False})
    on = build_chat_prompt(chat_tokenizer, msgs)
    assert off.text == on.text + "<think>\n\n</think>\n\n"
    assert not off.reasoning_open and not on.reasoning_open
    with pytest.raises(InvalidRequest) as info:
        build_chat_prompt(chat_tokenizer, msgs, template_kwargs={"chat_template": "{{ 1 }}"})
    assert info.value.param == "chat_template_kwargs.chat_template"


def test_chat_builder_detects_prompt_that_opens_reasoning(scripted_open_model):
    from mlx_lm.utils import load_tokenizer

    tok = load_tokenizer(scripted_open_model)
    built = build_chat_prompt(tok, [{"role": "user", "content": "hi"}])
    assert built.text.endswith("<|im_start|>assistant\n<think>")
    assert built.reasoning_open


def test_chat_builder_no_template_uses_fallback(base_tokenizer):
    built = build_chat_prompt(base_tokenizer, [{"role": "user", "content": "Hello"}])
    assert built.text == "User: Hello\n\nAssistant:"
    assert built.token_ids == base_tokenizer.encode(built.text, add_special_tokens=False)


def test_chat_builder_text_prompt(chat_tokenizer, base_tokenizer):
    for tok in (chat_tokenizer, base_tokenizer):
        built = build_text_prompt(tok, "The capital of France is")
        assert built.token_ids == tok.encode("The capital of France is")
        assert tok.decode(built.token_ids) == "The capital of France is"
    with pytest.raises(InvalidRequest):
        build_text_prompt(chat_tokenizer, "")


def test_chat_builder_bad_messages_name_the_param(chat_tokenizer):
    with pytest.raises(InvalidRequest) as info:
        build_chat_prompt(chat_tokenizer, [{"role": "user", "content": "a"}, {"role": "x"}])
    assert info.value.param == "messages[1].role"


def _with_template(src: Path, dst: Path, template: str):
    from mlx_lm.utils import load_tokenizer

    shutil.copytree(src, dst)
    cfg_path = dst / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = template
    cfg_path.write_text(json.dumps(cfg))
    return load_tokenizer(dst)


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
        ("{% for i in range(10**9) %}x{% endfor %}", "range() is too long"),
        ("{{ 'A' * 10**9 }}", "size budget"),
        (
            "{% for m in messages %}{% if m.role == 'user' and not loop.first %}"
            "{{ raise_exception('Conversation roles must alternate') }}{% endif %}{% endfor %}",
            "Conversation roles must alternate",
        ),
    ],
    ids=["escape", "range", "string", "raise"],
)
def test_chat_builder_model_template_failures(tiny_chat_model, tmp_path, template, why):
    tok = _with_template(tiny_chat_model, tmp_path / "model", template)
    msgs = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(TemplateError) as info:
        build_chat_prompt(tok, msgs)
    assert why in info.value.message


# Written for this test: the Jinja features real templates (Qwen3, Llama 3.1, Mistral) use.
RICH_TEMPLATE = """
{%- set ns = namespace(last_user=-1, sys='') -%}
{%- for m in messages[::-1] %}{% set i = (messages | length - 1) - loop.index0 %}
{%- if ns.last_user < 0 and m.role == 'user' %}{% set ns.last_user = i %}{% endif %}{% endfor %}
{%- if messages[0]['role'] == 'system' %}{% set ns.sys = messages[0]['content'] | trim %}{% endif %}
{{- bos_token if bos_token is defined and bos_token else '' -}}
[SYS]{{ ns.sys }} today={{ strftime_now('%Y') | length }}[/SYS]
{%- if tools is not none and tools %}[TOOLS]
{{- tools | map(attribute='function') | map(attribute='name') | join(',') }}|
{{- tools[0] | tojson }}[/TOOLS]{% endif %}
{%- for m in messages %}
  {%- if m.role == 'system' %}{% continue %}{% endif %}
  {%- if m.role == 'assistant' %}
    {%- set content = m.content %}
    {%- if '</think>' in content %}
      {%- set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}
    {%- if m.reasoning_content is string and loop.index0 > ns.last_user %}
      {{- '<think>' + m.reasoning_content.strip() + '</think>' }}{% endif %}
    <A>{{ content }}
    {%- if m.tool_calls is defined %}{% for tc in m.tool_calls %}
      {%- if tc.function is defined %}{% set tc = tc.function %}{% endif %}
      <call name="{{ tc.name }}">{{ tc.arguments | tojson }}</call>
    {%- endfor %}{% endif %}</A>
  {%- elif m.role == 'tool' %}<T id="{{ m.tool_call_id }}">{{ m.content }}</T>
  {%- elif m.content.startswith('!') and m.content.endswith('!') %}
    {{- '<U loud>' + m.content[1:-1] | upper + '</U>' }}
  {%- else %}<U>{{ m.content }}</U>{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<A>
  {%- if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}
"""


def test_chat_builder_rich_template_matches_transformers(tiny_chat_model, tmp_path):
    tok = _with_template(tiny_chat_model, tmp_path / "rich", RICH_TEMPLATE)
    messages = [
        {"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": "!hello!"},
        {"role": "assistant", "content": "<think>x</think>\nHi", "reasoning_content": "r"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": " plan ",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "P"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    kwargs = {"enable_thinking": False}
    built = build_chat_prompt(tok, messages, tools=TOOLS, template_kwargs=kwargs)
    expected = tok._tokenizer.apply_chat_template(
        messages, tools=TOOLS, add_generation_prompt=True, tokenize=False, **kwargs
    )
    assert built.text == expected
    assert "<U loud>HELLO</U>" in built.text and "<think>plan</think>" in built.text
    assert "[TOOLS]get_weather|" in built.text and built.text.endswith("<A><think></think>")


NO_TOOLS_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_builder_warns_of_tools_named_only_in_the_prose(tiny_chat_model, tmp_path):
    """A template that shows no tools, a user who names the tool: still a warning (the name
    in the prompt is the user's, not the template's); tiny-chat's template shows them."""
    plain = _with_template(tiny_chat_model, tmp_path / "plain", NO_TOOLS_TEMPLATE)
    asks = [{"role": "user", "content": "Use get_weather for Paris."}]
    built = build_chat_prompt(plain, asks, TOOLS)
    assert "get_weather" in built.text
    assert built.warnings == (
        "the model's chat template does not render tools: the model cannot see get_weather",
    )
    shown = _with_template(tiny_chat_model, tmp_path / "shown", CHATML_TEMPLATE)
    assert build_chat_prompt(shown, asks, TOOLS).warnings == ()


def test_chat_builder_continues_the_final_assistant_message(chat_tokenizer):
    """A prefill: the prompt stops right after the assistant's text (no end of turn, no new
    generation prompt), and its history is the same as the plain prompt's."""
    asks = [{"role": "user", "content": "Capital of France?"}]
    prefill = [*asks, {"role": "assistant", "content": "The capital is"}]
    continued = build_chat_prompt(chat_tokenizer, prefill, continue_final=True)
    assert continued.text.endswith("<|im_start|>assistant\nThe capital is")
    plain = build_chat_prompt(chat_tokenizer, asks)
    assert continued.text.startswith(plain.text)
    with pytest.raises(InvalidRequest, match="cannot be continued"):
        build_chat_prompt(
            chat_tokenizer, [*asks, {"role": "assistant", "content": ""}], continue_final=True
        )
