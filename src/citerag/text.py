"""String rules shared by the chunkers and the reference conformance: JavaScript's whitespace."""

from __future__ import annotations

import re

# ECMAScript WhiteSpace + LineTerminator: what String.prototype.trim() and /\s/ mean. Python's
# str.strip() differs (it keeps U+FEFF, strips U+001C..U+001F), and offsets must match the reference.
JS_WHITESPACE = "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
JS_WS_CLASS = "[" + "".join(f"\\u{ord(c):04x}" for c in JS_WHITESPACE) + "]"


def collapse(text: str) -> str:
    """Whitespace runs as one space, ends trimmed: how needles, quotes and training sentences are compared."""
    return " ".join(text.split())


def js_trim(s: str) -> str:
    return s.strip(JS_WHITESPACE)


def trimmed_range(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The range [start, end) with JavaScript whitespace trimmed from both ends; None if blank."""
    while start < end and text[start] in JS_WHITESPACE:
        start += 1
    while end > start and text[end - 1] in JS_WHITESPACE:
        end -= 1
    return (start, end) if start < end else None


_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """The reference BM25's tokens: runs of [a-z0-9] in the lower-cased text."""
    return _TOKEN.findall(text.lower())
