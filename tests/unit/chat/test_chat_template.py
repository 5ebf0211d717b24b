"""Chat templates are untrusted code: the sandbox and the time/size budgets must hold."""

from __future__ import annotations

import pytest

from mlxd.chat.template import render_template
from mlxd.errors import TemplateError

SMALL = {"seconds": 1.0, "max_bytes": 1 << 20}

ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__.__mro__ }}",
    "{{ self.__init__.__globals__ }}",
    "{{ cycler.__init__.__globals__.os.system('echo pwned') }}",
    "{{ namespace.__init__.__globals__ }}",
    "{% set x = namespace(_hidden=1) %}",
    "{{ messages.append(1) }}",  # the immutable sandbox refuses mutating builtins
    "{{ messages.__class__.__base__.__subclasses__() }}",
]


@pytest.mark.parametrize("source", ESCAPES)
def test_chat_template_escapes_fail_safely(source):
    with pytest.raises(TemplateError) as info:
        render_template(source, {"messages": []}, **SMALL)
    assert "unsafe" in info.value.message or "underscore" in info.value.message


def test_chat_template_unsafe_attributes_are_undefined_not_leaked():
    # Jinja's sandbox turns function internals into Undefined: it renders empty, leaks nothing.
    assert render_template("{{ raise_exception.__globals__ }}{{ strftime_now.__code__ }}", {}) == ""
    assert render_template("{{ lipsum }}", {}) == ""  # removed: one call builds megabytes


BUDGET_BUSTERS = [
    ("huge range", "{% for i in range(10**9) %}x{% endfor %}", "range() is too long"),
    ("string times", "{{ 'A' * 10**9 }}", "size budget"),
    ("list times then join", "{{ (['A' * 100000] * 100000) | join }}", "size budget"),
    (
        "doubling namespace",
        "{% set ns = namespace(s='A') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s }}",
        "size budget",
    ),
    ("output loop", "{% for i in range(100000) %}{{ 'A' * 1000 }}{% endfor %}", "size budget"),
    (
        "nested loops",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "time budget",
    ),
    ("format width", "{{ '{:>999999999}'.format(1) }}", "size budget"),
    ("percent width", "{{ '%999999999s' % 1 }}", "size budget"),
    ("center", "{{ 'a' | center(10**9) }}", "size budget"),
    ("replace blowup", "{{ ('x' * 1000) | replace('', 'A' * 100000) }}", "size budget"),
    ("indent blowup", "{{ ('\n' * 100000) | indent(1000) }}", "size budget"),
    ("huge power", "{{ 7 ** 100000 }}", "too large"),
    ("recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursed"),
]


@pytest.mark.parametrize(
    ("source", "why"), [b[1:] for b in BUDGET_BUSTERS], ids=[b[0] for b in BUDGET_BUSTERS]
)
def test_chat_template_budgets_stop_runaway_templates(source, why):
    with pytest.raises(TemplateError) as info:
        render_template(source, {}, **SMALL)
    assert why in info.value.message


def test_chat_template_raise_exception_message_reaches_the_user():
    source = (
        "{% if messages[0].role != 'user' %}{{ raise_exception('roles must alternate') }}"
        "{% endif %}ok"
    )
    with pytest.raises(TemplateError) as info:
        render_template(source, {"messages": [{"role": "assistant"}]})
    assert info.value.message == "roles must alternate"
    assert info.value.http_status == 400
    assert render_template(source, {"messages": [{"role": "user"}]}) == "ok"


def test_chat_template_syntax_error_is_a_template_error():
    with pytest.raises(TemplateError, match="syntax error"):
        render_template("{% for %}", {})


def test_chat_template_hf_helpers_work():
    source = (
        "{{ tools | tojson }}|{{ '<b>' | tojson }}|{{ {'a': 1} | tojson(indent=2) }}|"
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{% if loop.last %}{% break %}{% endif %}{% endfor %}{{ ns.n }}|"
        "{{ strftime_now('%Y') | length }}|{{ range(3) | list }}|{{ 'a b'.split() | join('-') }}"
    )
    out = render_template(source, {"tools": [{"name": "é"}], "messages": [1, 2, 3]})
    assert out == '[{"name": "é"}]|"<b>"|{\n  "a": 1\n}|3|4|[0, 1, 2]|a-b'


def test_chat_template_big_numbers_alone_are_fine():
    source = "{{ 1000000000 | string }} {{ 10**9 }} {{ dict(a=10**9).a }} {{ 'ab'.center(6) }}"
    assert render_template(source, {}) == "1000000000 1000000000 1000000000   ab  "


def test_chat_template_budget_is_configurable(monkeypatch):
    monkeypatch.setenv("MLXD_TEMPLATE_BYTES", "10")
    with pytest.raises(TemplateError, match="10 bytes"):
        render_template("{{ 'A' * 11 }}", {})
    assert render_template("{{ 'A' * 10 }}", {}) == "A" * 10


def test_chat_template_generation_tag_renders_its_body_within_budgets():
    # HF's {% generation %} marks assistant text for training masks; a prompt keeps the body,
    # its `set`s stay inside the block (a call block, as in HF), and the budgets still hold.
    source = (
        "{% set x = 'outer' %}{% for m in messages %}{%- generation -%}{% set x = m %}"
        "[{{ m }}:{{ loop.index }}]{%- endgeneration -%}{% endfor %}{{ x }}"
    )
    assert render_template(source, {"messages": ["a", "b"]}) == "[a:1][b:2]outer"
    with pytest.raises(TemplateError, match="size budget"):
        render_template("{% generation %}{{ 'x' * 10**7 }}{% endgeneration %}", {}, **SMALL)
    with pytest.raises(TemplateError, match="syntax error"):
        render_template("{% generation %}unclosed", {})
