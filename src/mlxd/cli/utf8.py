"""Text from the command line and stdin must be UTF-8; anything else is one clear error.

Python decodes argv (and, in C/POSIX-like locales, stdin) with `surrogateescape`: a byte that
is not UTF-8 becomes a lone surrogate that fails much later, deep in the tokenizer. In other
locales stdin decoding raises UnicodeDecodeError at the read. Both become InvalidRequest here.
"""

from __future__ import annotations

from mlxd.errors import InvalidRequest


def check_utf8(text: str, what: str) -> str:
    """`text`, or InvalidRequest naming `what` and the first byte that is not UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        byte = text[e.start].encode("utf-8", "surrogateescape")
        raise InvalidRequest(
            f"{what} is not valid UTF-8 (byte 0x{byte.hex()} at character {e.start + 1})"
        ) from None
    return text


def decode_error(e: UnicodeDecodeError, what: str = "input") -> InvalidRequest:
    """A strict decode that failed (stdin in a UTF-8 locale, a file) as one line."""
    byte = e.object[e.start : e.start + 1]
    return InvalidRequest(f"{what} is not valid UTF-8 (byte 0x{byte.hex()} at byte {e.start + 1})")
