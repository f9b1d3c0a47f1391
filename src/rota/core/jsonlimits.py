"""How deeply JSON may nest, checked without recursion.

Python's JSON reader and writer recurse once per level: a document nested a few thousand
levels deep ends in a ``RecursionError`` (or, in code that does not catch it, a crash of the
request or of a consumer loop). Rota therefore measures nesting *before* it parses text it did
not write (:func:`too_deep_at`, a scan of the raw text) and before it keeps or re-encodes a value
it did not build (:func:`value_too_deep`, a walk of the parsed value); both keep their own
stack, so the deepest input costs a bounded loop, never the interpreter's stack.

Depth counts open containers: ``1`` is 0 levels deep, ``[]`` and ``{"a": 1}`` are 1, ``{"a":
[1]}`` is 2.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Final

MAX_JSON_DEPTH: Final = 128
"""The deepest free-form JSON (job data, results, log data, declared job types) any part of Rota
takes, whatever the settings say: the wire's encoder writes at most 254 levels, and a message
wraps its data in a few levels of its own."""
DEFAULT_JSON_DEPTH: Final = 64
"""The default of ``ROTA_API__MAX_JSON_DEPTH``."""

Location = tuple[str | int, ...]
"""Where in a document: object keys and array indices, outermost first."""

_TOKENS: Final = re.compile(r'"[^"]*(?:"|\Z)|[\[\]{},:]')
"""The tokens that make a path, in text without escaped quotes or backslashes: strings (an
unterminated one runs to the end) and punctuation."""
_OPENERS: Final = frozenset("[{")
_ARRAYS: Final = (list, tuple)
_SCALARS: Final = frozenset((str, int, float, bool, type(None)))
"""The types of JSON's scalars (their subclasses take the slower test)."""
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in b'[]{}"')
LOCATE_CHARS: Final = 1 << 20
"""How far into a text :func:`too_deep_at` looks for where it goes too deep (it steps through
every token, so its work is bounded); past it, the location is the text as a whole."""


def _unescaped(text: bytes) -> bytes:
    """JSON text without its escaped backslashes and quotes: every quote left delimits a
    string (in JSON; anything else is refused by its parser anyway)."""
    if b"\\" not in text:
        return text
    return text.replace(b"\\\\", b"").replace(b'\\"', b"")


def _brackets(text: bytes) -> bytes:
    """The brackets of JSON text that are not inside its strings, in order. Every step is a
    pass in C: escapes out, only brackets and quotes kept, then adjacent quotes (the strings
    holding no bracket) dropped, which changes no other quote's parity, and what is left
    between quotes (inside strings) dropped."""
    kept = _unescaped(text).translate(None, _NOT_STRUCTURE)
    if b'"' in kept:
        kept = kept.replace(b'""', b"")
        if b'"' in kept:
            kept = b"".join(kept.split(b'"')[::2])
    return kept


def _raw(document: str | bytes) -> bytes:
    if isinstance(document, str):
        return document.encode("utf-8", "surrogatepass")
    return document


def max_depth_exceeded(document: str | bytes, limit: int) -> bool:
    """Whether the JSON text ``document`` nests deeper than ``limit`` levels (brackets inside
    strings do not count). A fast scan: no parse, one loop step per bracket. Text that is not
    JSON is measured all the same (its parser refuses it afterwards)."""
    raw = _raw(document)
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for byte in _brackets(raw):
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif depth:  # a stray closer (not JSON) never hides the openers after it
            depth -= 1
    return False


def too_deep_at(document: str | bytes, limit: int) -> Location | None:
    """``None`` when the JSON text ``document`` nests at most ``limit`` levels deep; else where
    it first goes deeper: the keys and indices leading to the container that passes the limit.
    """
    if not max_depth_exceeded(document, limit):
        return None
    text = _unescaped(_raw(document)[:LOCATE_CHARS]).decode("utf-8", "replace")
    return _locate(text, limit)


def _locate(text: str, limit: int) -> Location:
    """The location of the first container opened past ``limit`` (a slower scan, run only on
    text already known to be too deep); ``()`` when it is not within ``text``."""
    path: list[str | int] = []  # the segment leading to each open container but the outermost
    frames: list[_Frame] = []
    pending = '""'  # the last string seen: an object's key when a colon follows
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in _OPENERS:
            if frames:
                path.append(frames[-1].segment())
            frames.append(_Frame(token == "["))
            if len(frames) > limit:
                return tuple(path)
        elif token in ("]", "}"):
            if not frames:
                break
            frames.pop()
            if len(path) >= len(frames) and path:
                path.pop()
        elif token == ",":
            if frames:
                frames[-1].next()
        elif token == ":":
            if frames:
                frames[-1].key = _unquote(pending)
        else:
            pending = token
    return ()


class _Frame:
    """An open container of :func:`_locate`: an array's running index, an object's key."""

    __slots__ = ("array", "index", "key")

    def __init__(self, array: bool) -> None:
        self.array = array
        self.index = 0
        self.key = ""

    def segment(self) -> str | int:
        return self.index if self.array else self.key

    def next(self) -> None:
        self.index += 1
        self.key = ""


def _unquote(token: str) -> str:
    try:
        text = json.loads(token)  # one string: nothing nested
    except ValueError:
        return token[1:-1]
    return text if isinstance(text, str) else token[1:-1]


def value_too_deep(value: object, limit: int) -> bool:
    """Whether the parsed JSON ``value`` (dicts, lists, tuples, scalars) nests deeper than
    ``limit`` levels; an explicit stack, so any depth is safe to measure."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if type(item) in _SCALARS:  # the common case, without the ABC's isinstance
            continue
        if isinstance(item, _ARRAYS):
            children: Iterable[object] = item
        elif isinstance(item, Mapping):
            children = item.values()
        else:
            continue
        depth += 1
        if depth > limit:
            return True
        for child in children:
            if type(child) not in _SCALARS:
                stack.append((child, depth))
    return False
