"""Render chat templates in a sandbox with a time and an output-size budget.

Templates ship with models, so they are untrusted code. We render them ourselves (not through
transformers' apply_chat_template) in jinja2's ImmutableSandboxedEnvironment with what HF's
templating adds to jinja (raise_exception, tojson, strftime_now, namespace, loop controls, the
`{% generation %}` tag), and add budgets the
sandbox lacks: every loop over `range`, attribute lookup, call, filter and string-building
operator checks a per-render deadline and refuses results larger than the byte budget.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sized
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.parser import Parser as JinjaParser
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from mlxd.config import setting_float, setting_int
from mlxd.errors import TemplateError, one_line

__all__ = ["render_template"]

_MAX_RANGE = 100_000  # jinja2.sandbox.MAX_RANGE: one range() may not be longer
_MAX_POW_BITS = 4096  # `x ** y` results larger than this are refused before computing
_BIG_WIDTH = re.compile(r"\d{7,}")  # a format width of a million chars or more


class _Budget(threading.local):
    """Per-thread render budget: renders may run concurrently on server threads."""

    deadline: float = float("inf")
    max_bytes: int = 1 << 62
    seconds: float = 0.0

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateError(
                f"chat template rendering exceeded its time budget ({self.seconds:g}s)"
            )

    def check_size(self, n: int) -> None:
        if n > self.max_bytes:
            raise TemplateError(
                f"chat template output exceeded its size budget ({self.max_bytes} bytes)"
            )


_budget = _Budget()


class _BudgetedEnvironment(ImmutableSandboxedEnvironment):
    """The HF-compatible sandbox plus budget checks at every operation we can intercept."""

    intercepted_binops = frozenset({"*", "+", "**", "%"})

    def call_binop(self, context: Context, operator: str, left: object, right: object) -> object:
        _budget.check_time()
        _precheck_binop(operator, left, right)
        result = super().call_binop(context, operator, left, right)
        _check_result(result)
        return result

    def getattr(self, obj: object, attribute: str) -> object:
        _budget.check_time()
        return super().getattr(obj, attribute)

    def getitem(self, obj: object, argument: object) -> object:
        _budget.check_time()
        return super().getitem(obj, argument)

    def call(__self, __context: Context, __obj: object, *args: object, **kwargs: object) -> object:  # noqa: N805
        _budget.check_time()
        # str.format arrives wrapped by the sandbox; its __wrapped__ is the bound method.
        target = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        if isinstance(target, str | list | tuple):  # a method that may build a big string
            _precheck_args(args, kwargs)
            _budget.check_size(_estimate(getattr(__obj, "__name__", ""), target, args))
        result = super().call(__context, __obj, *args, **kwargs)
        _check_result(result)
        return result


def _precheck_binop(operator: str, left: object, right: object) -> None:
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(n, int):
                _budget.check_size(len(seq) * max(n, 0))
    elif operator == "+" and isinstance(left, str | list) and isinstance(right, str | list):
        _budget.check_size(len(left) + len(right))
    elif operator == "%" and isinstance(left, str) and _BIG_WIDTH.search(left):
        raise TemplateError("chat template format width exceeds its size budget")
    elif operator == "**" and isinstance(left, int) and isinstance(right, int):
        if right > 0 and max(left.bit_length(), 1) * right > _MAX_POW_BITS:
            raise TemplateError("chat template arithmetic result is too large")


def _precheck_args(args: tuple[object, ...], kwargs: Mapping[str, object]) -> None:
    # On a string or list, a huge integer argument (center(10**9)) means a huge result.
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool):
            _budget.check_size(abs(value))


def _estimate(name: str, target: object, args: tuple[object, ...]) -> int:
    """Upper bound on the output size of string-amplifying filters and methods, before running.

    The sandbox cannot interrupt a single C-level call, so the few operations whose output can
    dwarf their input (replace, indent, join, format, expandtabs, wordwrap) are estimated first.
    """
    name = name.removeprefix("sync_").removeprefix("do_")
    size = _size(target)
    if name == "replace" and len(args) >= 2 and isinstance(target, str):
        old, new = str(args[0]), str(args[1])
        return size + (size // max(len(old), 1) + 1) * max(len(new) - len(old), 0)
    if name == "indent" and isinstance(target, str):
        width = args[0] if args else 4
        per_line = width if isinstance(width, int) else len(str(width))
        return size + (target.count("\n") + 1) * per_line
    if name == "join":
        if isinstance(target, str) and args:  # str.join(iterable): target is the separator
            items = args[0]
            return _size(items) + len(target) * (len(items) if isinstance(items, Sized) else 1)
        sep = args[0] if args and isinstance(args[0], str) else ""
        return size + len(sep) * (len(target) if isinstance(target, Sized) else 1)
    if name in ("format", "format_map") and isinstance(target, str):
        return size + (_budget.max_bytes + 1 if _BIG_WIDTH.search(target) else 0)
    if name == "expandtabs" and isinstance(target, str):
        tab = args[0] if args and isinstance(args[0], int) else 8
        return size + target.count("\t") * tab
    if name == "wordwrap":
        return 2 * size
    return size


def _size(value: object) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list | tuple):
        return sum(len(v) if isinstance(v, str) else 32 for v in value)
    return 0


def _check_result(result: object) -> None:
    if isinstance(result, str | list | tuple):
        _budget.check_size(len(result))


def _budgeted_filter(func: Callable[..., object]) -> Callable[..., object]:
    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        _budget.check_time()
        values = [a for a in args if isinstance(a, str | list | tuple)]
        if values:  # the filtered value: the first string/list argument (after any context)
            rest = tuple(args[args.index(values[0]) + 1 :])
            _precheck_args(rest, kwargs)
            _budget.check_size(_estimate(func.__name__, values[0], rest))
        result = func(*args, **kwargs)
        _check_result(result)
        return result

    return wrapper


def _range(*args: int) -> Iterator[int]:
    """range() that honors the sandbox length cap and checks the deadline while looping."""
    rng = range(*args)
    if len(rng) > _MAX_RANGE:
        raise TemplateError(f"chat template range() is too long (more than {_MAX_RANGE} items)")
    for i, value in enumerate(rng):
        if i % 256 == 0:
            _budget.check_time()
        yield value


class _TemplateRaised(jinja2.exceptions.TemplateError):
    """raise_exception() from the template: its message is meant for the user."""


def _raise_exception(message: object) -> None:
    raise _TemplateRaised(str(message))


def _tojson(
    x: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # HF's tojson: no HTML escaping, optional indent (jinja's own escapes '<' and '>').
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _SafeNamespace(Namespace):
    """namespace() that refuses underscore names, as HF's TemplateNamespace does."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        if any(isinstance(k, str) and k.startswith("_") for k in attrs):
            raise SecurityError("chat templates cannot use underscore names in namespace()")
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: object) -> None:
        # `{% set ns.s = ns.s ~ ns.s %}` in a loop is how a template grows a string unboundedly.
        _budget.check_time()
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError("chat templates cannot use underscore names in namespace()")
        _check_result(value)
        super().__setitem__(name, value)


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: HF marks the assistant's own text with it (for
    training masks); rendering a prompt keeps the body as is. Like HF, the body is a call block,
    so its `set`s stay inside it."""

    tags = {"generation"}

    def parse(self, parser: JinjaParser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        block = nodes.CallBlock(self.call_method("_body"), [], [], body)
        return block.set_lineno(lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


def _make_env() -> _BudgetedEnvironment:
    env = _BudgetedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _GenerationTag]
    )
    env.filters["tojson"] = _tojson
    env.filters = {name: _budgeted_filter(f) for name, f in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _SafeNamespace
    env.globals["range"] = _range
    del env.globals["lipsum"]  # lipsum(n=10**6) builds megabytes in one call; unused by templates
    return env


_ENV = _make_env()


@functools.lru_cache(maxsize=32)
def _compile(source: str) -> jinja2.Template:
    try:
        return _ENV.from_string(source)
    except TemplateSyntaxError as e:
        raise TemplateError(f"chat template has a syntax error: {e.message}") from None


def render_template(
    source: str,
    context: Mapping[str, Any],
    *,
    seconds: float | None = None,
    max_bytes: int | None = None,
) -> str:
    """Render `source` with `context` in the sandbox; every failure is a TemplateError.

    Budgets default to the `template_seconds` and `template_bytes` settings. A template's
    raise_exception("...") message comes back as the TemplateError message.
    """
    seconds = setting_float("template_seconds") if seconds is None else seconds
    max_bytes = setting_int("template_bytes") if max_bytes is None else max_bytes
    template = _compile(source)
    _budget.seconds, _budget.max_bytes = seconds, max_bytes
    _budget.deadline = time.monotonic() + seconds
    try:
        return _collect(template.generate(**context))
    except TemplateError:
        raise
    except _TemplateRaised as e:
        raise TemplateError(str(e.message)) from None
    except SecurityError as e:
        raise TemplateError(f"chat template tried an unsafe operation: {e}") from None
    except jinja2.exceptions.TemplateError as e:
        raise TemplateError(f"chat template error: {e.message or e}") from None
    except RecursionError:
        raise TemplateError("chat template recursed too deeply") from None
    except (MemoryError, OverflowError):
        raise TemplateError("chat template output exceeded its size budget") from None
    except Exception as e:  # the template is untrusted code: any failure is its error
        raise TemplateError(f"chat template failed: {one_line(e)}") from None
    finally:
        _budget.deadline = float("inf")


def _collect(chunks: Iterator[str]) -> str:
    parts: list[str] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        _budget.check_size(size)
        _budget.check_time()
        parts.append(chunk)
    return "".join(parts)
