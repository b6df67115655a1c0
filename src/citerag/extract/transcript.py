"""Transcripts (WebVTT, SubRip): cues joined into text, each cue a paragraph with its time range.

A small line-based parser, lenient the way players are: a timing line (`a --> b`) starts a cue even
without the blank line before it; the line just before a timing line is its identifier only when a
blank line precedes it; NOTE, STYLE and REGION blocks and the file header are skipped; markup
(<i>, <c.color>, <v Speaker>, inline <00:00:01.000> timestamps) is removed and entities decoded.
Rolling captions (YouTube repeats the previous line at the top of each cue) are de-duplicated.

The locator map holds one span per cue: canonical [start, end) -> (t_start, t_end) in seconds.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder
from citerag.extract.decode import decode_text
from citerag.types import Extracted

_TIME = r"(?:(\d+):)?(\d{1,2}):(\d{2})[.,](\d{1,3})"
_TIMING = re.compile(rf"^\s*{_TIME}\s*-->\s*{_TIME}")
_TAG = re.compile(r"<[^>\n]*>")
_SPEAKER = re.compile(r"<v(?:\.[^ >]*)?\s+([^>]+)>")
MAX_CUES = 200_000


@dataclass
class Cue:
    start: float
    end: float
    lines: list[str]


def _seconds(h: str | None, m: str, s: str, frac: str) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + int(frac.ljust(3, "0")) / 1000


def _clean(line: str) -> str:
    line = _SPEAKER.sub(lambda m: m.group(1).strip() + ": ", line)
    return " ".join(html.unescape(_TAG.sub("", line)).split())


def parse_cues(text: str) -> list[Cue]:
    cues: list[Cue] = []
    current: Cue | None = None
    skipping = False  # inside a NOTE / STYLE / REGION block
    lines = text.split("\n")
    for i, raw in enumerate(lines):
        line = raw.strip()
        m = _TIMING.match(line)
        if m:
            g = m.groups()
            if current is not None and current.lines and i > 0 and lines[i - 1].strip() and (
                    i < 2 or not lines[i - 2].strip()) and current.lines[-1] == _clean(lines[i - 1]):
                current.lines.pop()  # that line was this cue's identifier, not the last cue's words
            current = Cue(_seconds(*g[:4]), _seconds(*g[4:]), [])
            cues.append(current)
            skipping = False
            if len(cues) > MAX_CUES:
                raise ExtractionError(f"more than {MAX_CUES} cues: refused")
            continue
        if not line:
            if current is not None and current.lines:
                current = None  # a blank line ends the cue's payload
            skipping = False
            continue
        if skipping:
            continue
        prev_blank = i == 0 or not lines[i - 1].strip()
        if prev_blank and re.match(r"^(NOTE|STYLE|REGION)\b", line):
            skipping = True
            continue
        if current is None:
            continue  # file header, identifiers: not cue text
        cleaned = _clean(raw)
        if cleaned:
            current.lines.append(cleaned)
    return cues


def _deduplicate(cues: list[Cue]) -> list[Cue]:
    """Drop the lines a rolling caption repeats from the cue before it (only where captions roll)."""
    repeats = sum(1 for a, b in zip(cues, cues[1:], strict=False) if a.lines and b.lines and b.lines[0] == a.lines[-1])
    if repeats < 0.3 * len(cues):
        return [c for c in cues if c.lines]
    out: list[Cue] = []
    previous: list[str] = []
    for cue in cues:
        lines = list(cue.lines)
        while lines and lines[0] in previous:
            lines.pop(0)
        previous = cue.lines
        if lines:
            out.append(Cue(cue.start, cue.end, lines))
    return out


class TranscriptExtractor:
    name = "transcript"
    version = "1"
    suffixes: tuple[str, ...] = (".vtt", ".srt")

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        text, warnings = decode_text(data)
        vtt = path.suffix.lower() == ".vtt"
        if vtt and not text.lstrip("\ufeff").startswith("WEBVTT"):
            warnings.append("no WEBVTT header; read anyway")
        cues = _deduplicate(parse_cues(text))
        if not cues:
            raise ExtractionError(f"no cues found: not a {'WebVTT' if vtt else 'SubRip'} transcript")
        out = TextBuilder()
        for cue in cues:
            out.block("\n".join(cue.lines), t_start=cue.start, t_end=cue.end)
        return out.build(title or path.stem, self.name, self.version, warnings, what="transcript")
