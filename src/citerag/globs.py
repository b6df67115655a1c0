"""Path patterns as people write them for a repository or a folder (`docs/**/*.md`, `**/README.md`), read as
PurePosixPath.full_match reads them: written here because that arrives only in Python 3.13 and fnmatch lets `*`
cross folders."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache


def _segment(part: str) -> str:
    """One path segment of a glob as a regex: `*` and `?` never cross a '/'."""
    out, i = [], 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (j := part.find("]", i + 2)) != -1:
            body = part[i + 1:j].replace("\\", "\\\\")
            out.append("[^/" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@cache
def glob_regex(pattern: str) -> re.Pattern[str]:
    """`pattern` as PurePosixPath.full_match reads it (Python 3.13+, not in 3.11): `**` is any number of
    directories, zero included, so `**/*.md` matches README.md as well as docs/a/b.md."""
    parts = pattern.strip("/").split("/")
    regex = "".join(("(?:.*)" if i == len(parts) - 1 else "(?:[^/]+/)*") if p == "**"
                    else _segment(p) + ("" if i == len(parts) - 1 else "/") for i, p in enumerate(parts))
    return re.compile(regex + r"\Z", re.DOTALL)


def matches(path: str, patterns: Sequence[str]) -> bool:
    """Whether the slash-separated relative `path` matches any of `patterns`."""
    return any(glob_regex(p).match(path) for p in patterns)
