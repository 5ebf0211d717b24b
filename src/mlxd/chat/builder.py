"""Turn OpenAI-shaped messages (or a raw prompt) into token ids through the model's template.

The chat template renders in mlxd.chat.template's sandbox with time and size budgets. A model
without a chat template uses the fallback format below (documented in docs/usage/chat-layer.md):

    System: <system text>

    User: <user text>

    Assistant: <assistant text>

    Tool (<tool_call_id>): <tool result>

    Assistant:
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlxd.chat.boundaries import PromptText, prompt_boundaries
from mlxd.chat.control_tokens import (
    Shield,
    added_token_ids,
    added_token_pattern,
    shield_messages,
)
from mlxd.chat.formats import detect_reasoning, named_template
from mlxd.chat.messages import (
    check_template_kwargs,
    join_text,
    nine_char_call_ids,
    normalize_messages,
    normalize_tools,
)
from mlxd.chat.prompt_budget import check_fits, tokenizing
from mlxd.chat.template import render_template
from mlxd.config import setting_flag, setting_int
from mlxd.errors import InvalidRequest, TemplateError
from mlxd.types import ImageInputs, PromptBoundaries, Tokenizer

__all__ = [
    "BuiltPrompt",
    "build_chat_prompt",
    "build_text_prompt",
    "ends_in_reasoning",
    "expand_images",
    "fallback_prompt",
    "render_chat_text",
]

_FALLBACK_REPLY = "\n\nAssistant:"  # the fallback format's generation prompt
_SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


@dataclass(frozen=True, slots=True)
class BuiltPrompt:
    """A rendered prompt: the ids the engine prefills and the text they came from.

    images: a vision request's images; token_ids hold each image's text as its processor
    writes it (its positions, and its family's structure tokens); `text` shows placeholders.
    reasoning_open: the prompt ends inside an open reasoning block (e.g. a template that
    appends "<think>\\n"), so the output starts in reasoning. warnings: what the caller should
    be told about the prompt (no chat template, tools the template does not show).
    boundaries: where its parts end (prefix-cache snapshot points; chat.boundaries).
    """

    token_ids: list[int]
    text: str
    reasoning_open: bool = False
    warnings: tuple[str, ...] = ()
    boundaries: PromptBoundaries = PromptBoundaries()
    images: ImageInputs | None = None  # the request's images; each fills its positions

    @property
    def prompt_tokens(self) -> int:
        return len(self.token_ids)


def build_chat_prompt(
    tokenizer: Tokenizer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    template: str | None = None,
    images: ImageInputs | None = None,
    window: int | None = None,
    continue_final: bool = False,
) -> BuiltPrompt:
    """Validate, render and tokenize a chat request. `template`: a Jinja chat template to use
    instead of the model's (the server allows it only when its operator does). `images`: the
    messages' images in order (chat.images.load_images); the template writes one placeholder
    per image part, which becomes that image's text before the prompt is tokenized. `window`:
    the model's context window: a rendered prompt that cannot fit it is refused before it is
    tokenized (ContextOverflow), and large ones tokenize in turns (chat.prompt_budget).

    Control tokens written in messages tokenize as text unless MLXD_CONTENT_CONTROL_TOKENS=1
    (mlxd.chat.control_tokens). Raises InvalidRequest(param="messages[...]") for malformed
    input, TemplateError when the template raises, escapes the sandbox or exceeds its budget.
    """
    msgs = normalize_messages(messages)
    tool_list = normalize_tools(tools)
    kwargs = check_template_kwargs(template_kwargs)
    shield = Shield()
    if not setting_flag("content_control_tokens"):  # content tokenizes as text (the default)
        msgs, shield = shield_messages(tokenizer, msgs, detect_reasoning(tokenizer) or ())
    shown = render_chat_text(tokenizer, msgs, tool_list, kwargs, template, not continue_final)
    if continue_final:
        shown = _inside_final_message(shown, msgs)
    rendered = shown if images is None else expand_images(shown, images)
    if window is not None:
        check_fits(tokenizer, rendered, window)
    fallback = template is None and _uses_fallback(tokenizer)

    def render(other: list[dict[str, Any]], generation: bool) -> str:
        text = render_chat_text(tokenizer, other, tool_list, kwargs, template, generation)
        return text if images is None else expand_images(text, images, some=True)

    def encode(piece: str, at_start: bool) -> list[int]:
        return shield.encode(tokenizer, piece, add_special_tokens=fallback and at_start)

    with tokenizing(rendered):
        # Templates write their own BOS (as HF's apply_chat_template assumes); the fallback
        # does not, so it gets the tokenizer's special tokens like a raw prompt.
        ids = shield.encode(tokenizer, rendered, add_special_tokens=fallback)
        added = added_token_pattern(tokenizer)
        prompt = PromptText(rendered, ids, encode, added, added_token_ids(tokenizer))
        boundaries = prompt_boundaries(msgs, prompt, render)
    text = shield.restore(shown)
    return BuiltPrompt(
        token_ids=ids,
        text=text,
        reasoning_open=_ends_in_reasoning(tokenizer, text),
        warnings=_warnings(
            fallback,
            tool_list,
            text,
            lambda: render_chat_text(tokenizer, msgs, None, kwargs, template) != shown,
        ),
        boundaries=boundaries,
        images=images,
    )


def _inside_final_message(rendered: str, msgs: list[dict[str, Any]]) -> str:
    """The prompt cut right after the final (assistant) message's text, so generation
    continues that message (a prefill), as HF's continue_final_message does."""
    content = msgs[-1]["content"]
    if isinstance(content, list):
        content = join_text(p["text"] for p in content if p.get("type") == "text")
    at = rendered.rfind(content) if content else -1
    if at < 0:
        raise InvalidRequest(
            "the model's chat template does not show the final assistant message as "
            "written, so it cannot be continued",
            param="messages",
        )
    return rendered[: at + len(content)]


def expand_images(text: str, images: ImageInputs, *, some: bool = False) -> str:
    """Each image placeholder the template wrote becomes its image's text (as the model's
    processor writes it), in order; the count must match the images sent (`some`: a
    rendering of part of the conversation holds the first images only). Placeholders typed in
    content never count: the shield made them other characters."""
    found = text.count(images.placeholder)
    if found > len(images.images) or (found < len(images.images) and not some):
        raise InvalidRequest(
            f"the chat template placed {found} image(s) for the {len(images.images)} sent: "
            f"this model's template does not show images where the messages have them",
            param="messages",
        )
    texts = iter(image.text for image in images.images)
    return re.sub(re.escape(images.placeholder), lambda _: next(texts), text)


def _warnings(
    fallback: bool,
    tools: list[dict[str, Any]] | None,
    text: str,
    renders_tools: Callable[[], bool],
) -> tuple[str, ...]:
    """What to tell the caller: no template; tools the prompt does not show (a tool's name
    may be in the conversation's own text: then the prompt rendered without the tools,
    `renders_tools`, says whether the template shows them at all)."""
    if fallback:
        return ("the model has no chat template: the prompt uses mlxd's plain "
                "'User: ... Assistant:' format",)  # fmt: skip
    names = [t["function"]["name"] for t in tools or []]
    unseen = [name for name in names if name not in text]
    if names and not unseen and not renders_tools():
        unseen = names
    if unseen:
        return (f"the model's chat template does not render tools: the model cannot see "
                f"{', '.join(unseen)}",)  # fmt: skip
    return ()


def build_text_prompt(tokenizer: Tokenizer, prompt: str, window: int | None = None) -> BuiltPrompt:
    """Tokenize a raw completion prompt, adding BOS only if the tokenizer wants it (once);
    `window` as for build_chat_prompt."""
    if not isinstance(prompt, str):
        raise InvalidRequest("prompt must be a string", param="prompt")
    if window is not None:
        check_fits(tokenizer, prompt, window, param="prompt")
    bos = getattr(tokenizer, "bos_token", None)
    has_bos = isinstance(bos, str) and bool(bos) and prompt.startswith(bos)
    with tokenizing(prompt):
        ids = _encode(tokenizer, prompt, add_special_tokens=not has_bos)
    if not ids:
        raise InvalidRequest("prompt is empty", param="prompt")
    return BuiltPrompt(token_ids=ids, text=prompt, reasoning_open=False)


def render_chat_text(
    tokenizer: Tokenizer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any],
    template: str | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text for already-normalized messages (`template`, else the model's template,
    mlx-lm renderer or the fallback format)."""
    renderer = getattr(tokenizer, "_chat_template", None)
    if callable(renderer) and template is None:
        # mlx-lm's own Python renderers (mlx_lm.chat_templates): library code, not model code.
        return str(
            tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **template_kwargs,
            )
        )
    source = template if template is not None else _template_source(tokenizer, bool(tools))
    if source is None:
        text = fallback_prompt(messages, tools)
        return text if add_generation_prompt else text.removesuffix(_FALLBACK_REPLY)
    if "[TOOL_CALLS]" in source and "tool_call_id" in source:  # Mistral: 9-character ids
        messages = nine_char_call_ids(messages)
    context: dict[str, Any] = {
        **_special_tokens(tokenizer),
        **template_kwargs,
        "messages": messages,
        "add_generation_prompt": add_generation_prompt,
    }
    if tools:  # unsent stays undefined: some templates iterate `tools` whenever it is defined
        context["tools"] = tools
    # The size budget bounds what a template adds: a long prompt is the window's business.
    budget = setting_int("template_bytes") + len(json.dumps([messages, tools], default=str))
    text = render_template(source, context, max_bytes=budget)
    if not text:
        raise TemplateError("chat template rendered an empty prompt")
    return text


def fallback_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The documented plain format for models without a chat template."""
    blocks = []
    if tools:
        specs = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
        blocks.append(f'Tools (reply with JSON {{"name": ..., "arguments": ...}}):\n{specs}')
    for m in messages:
        role = m["role"]
        text = m["content"]
        if isinstance(text, list):  # parts with images: the plain format shows the text
            text = join_text(p["text"] for p in text if p["type"] == "text")
        if m.get("tool_calls"):
            calls = [tc["function"] for tc in m["tool_calls"]]
            text = (text + "\n" if text else "") + json.dumps(calls, ensure_ascii=False)
        label = f"Tool ({m['tool_call_id']})" if role == "tool" else role.capitalize()
        # An answer's own leading space (the model wrote " Paris" after "Assistant:") stands
        # for the separator: the history then tokenizes as the model generated it.
        blocks.append(f"{label}:{text}" if text[:1] == " " else f"{label}: {text}")
    blocks.append(_FALLBACK_REPLY.strip())
    return "\n\n".join(blocks)


def _uses_fallback(tokenizer: Tokenizer) -> bool:
    return not callable(getattr(tokenizer, "_chat_template", None)) and (
        _template_source(tokenizer) is None
    )


def _template_source(tokenizer: Tokenizer, tools: bool = False) -> str | None:
    template = named_template(tokenizer, tools)
    return template if template is not None and template.strip() else None


def _special_tokens(tokenizer: Tokenizer) -> dict[str, str]:
    out = {}
    for name in _SPECIAL_TOKEN_NAMES:
        value = getattr(tokenizer, name, None)
        if isinstance(value, str):
            out[name] = value
    return out


def _encode(tokenizer: Tokenizer, text: str, *, add_special_tokens: bool) -> list[int]:
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=add_special_tokens)]


def _ends_in_reasoning(tokenizer: Tokenizer, text: str) -> bool:
    return ends_in_reasoning(text, detect_reasoning(tokenizer))


def ends_in_reasoning(text: str, markers: tuple[str, str] | None) -> bool:
    """The prompt ends inside an open reasoning block: `start` last, unclosed, then blanks."""
    if markers is None:
        return False
    start, end = markers
    opened = text.rfind(start)
    return opened >= 0 and text.find(end, opened) < 0 and not text[opened + len(start) :].strip()
