"""Error messages the service sends: short, quoting little of the input, nothing internal.

A message is at most :data:`MAX_MESSAGE_BYTES` of UTF-8, quotes at most
:data:`MAX_QUOTE` characters of any text field of the request, and carries no terminal
escapes; tracebacks, paths and node addresses stay in the service's log.
"""

from __future__ import annotations

import re
from typing import Any

from cluster.errors import QUOTE_LIMIT

MAX_MESSAGE_BYTES = 1000
MAX_QUOTE = QUOTE_LIMIT  # characters of a request's text quoted back
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def first_line(text: str, limit: int) -> str:
    """The first line of ``text`` without terminal escapes, at most ``limit`` characters."""
    line = _ESCAPES.sub("", text).strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _long_texts(request: Any) -> list[str]:
    """The request's text fields longer than :data:`MAX_QUOTE` characters, longest first."""
    fields: list[tuple[Any, Any]] = getattr(request, "ListFields", list)()
    texts = [value for _, value in fields if isinstance(value, str) and len(value) > MAX_QUOTE]
    return sorted(texts, key=len, reverse=True)


def short_message(text: str, request: Any = None) -> str:
    """``text`` with every long text field of ``request`` cut to :data:`MAX_QUOTE`
    characters, without escapes, and at most :data:`MAX_MESSAGE_BYTES` bytes of UTF-8."""
    text = _ESCAPES.sub("", text)
    for value in _long_texts(request):
        cut = f"{value[:MAX_QUOTE - 20]}... ({len(value)} characters)"
        text = text.replace(repr(value)[1:-1], cut).replace(value, cut)
    data = text.encode()
    if len(data) <= MAX_MESSAGE_BYTES:
        return text
    return data[:MAX_MESSAGE_BYTES - 3].decode(errors="ignore") + "..."
