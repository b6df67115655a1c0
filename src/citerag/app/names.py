"""The name an uploaded file keeps: a plain name a reader can trust, never a path.

A name is shown to people (the document list, citations, a download's file name) and picks the extractor by its
suffix, so what it shows must be what it is. Bidi controls reorder what is displayed (`evil` U+202E `gpj.md` reads
as `evildm.jpg`), zero-width and other format characters make two names look alike, and line separators and
control characters break the lines a name is printed on: a name holding any of them is refused rather than
cleaned, since a cleaned name would no longer be the one its sender sees. Names are kept in NFC, so that the
composed and decomposed spellings of one name (macOS sends the latter) name one document; not NFKC, which would
change what the name says (full-width letters, ligatures).

A pure rule, for every way a name comes in: the API's upload and replace routes call it (to name the field in
their 422), and the application core's `app.uploads.upload` holds every other caller to it.
"""

from __future__ import annotations

import unicodedata
from pathlib import PurePosixPath

from citerag.errors import CiteragError

MAX_LENGTH = 255  # characters, as most file systems allow for one name
# Cc: C0 and C1 controls (tab, newline, DEL, NEL); Cf: format characters, every bidi control (U+202A-U+202E,
# U+2066-U+2069, U+200E, U+200F, U+061C) and the invisible ones (U+200B-U+200D, U+2060, U+FEFF, U+00AD, tags);
# Cs: lone surrogates (a name decoded with surrogateescape); Co: private use, which shows as nothing standard;
# Zl, Zp: line and paragraph separators.
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


class UnusableName(CiteragError):
    """A file name that cannot name a document; the message shows it escaped."""


def upload_name(raw: str) -> str:
    """The name `raw` (as a client sent it, folders and all) is kept under: its last segment, in NFC, without
    surrounding spaces; raises UnusableName when nothing usable is left or it holds a character it must not."""
    shown = repr(raw[:80])  # repr escapes every refused character: the message must not carry them
    name = PurePosixPath(unicodedata.normalize("NFC", raw).replace("\\", "/")).name.strip()
    if not name or name in (".", ".."):
        raise UnusableName(f"file name {shown} is not usable: give each file a plain name")
    if len(name) > MAX_LENGTH:
        raise UnusableName(f"file name {shown} is over {MAX_LENGTH} characters")
    bad = next((ch for ch in name if unicodedata.category(ch) in REFUSED_CATEGORIES), None)
    if bad is not None:
        raise UnusableName(f"file name {shown} holds U+{ord(bad):04X} ({_described(bad)}): invisible, control and "
                           "text-direction characters are not allowed in a file name")
    return name


def _described(ch: str) -> str:
    return unicodedata.name(ch, f"a character of category {unicodedata.category(ch)}").lower()
