"""The needle rule: a chunk is correct when its text, whitespace runs collapsed, contains the
whitespace-collapsed needle (plain, case-sensitive substring test).

"Its text" is the embedded text less the contextual header `[Title > Section]` (strategies E, F): the
header repeats a heading, and a needle that occurs only in a heading must not count. Overlap stays in,
since it is part of what the chunk embeds and returns to the generator's context. Strategies C-F never
cut heading lines into chunks; blind cuts (A, B) do, which `check_needles` reports as a ground-truth problem.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from citerag.chunk import header_for
from citerag.eval.truth import Question
from citerag.text import collapse
from citerag.types import Document, Extracted, StoredChunk


def chunk_body(chunk: StoredChunk, document: Document) -> str:
    """The chunk's embedded text without its contextual header, if it has one."""
    header = f"[{header_for(document.title, chunk.section)}]\n"
    return chunk.text[len(header):] if chunk.text.startswith(header) and chunk.text != chunk.content else chunk.text


def contains_needle(text: str, needle: str) -> bool:
    return collapse(needle) in collapse(text)


def correct_ranks(bodies: Iterable[str], needle: str) -> list[int]:
    """1-based ranks of the bodies that hold the needle."""
    target = collapse(needle)
    return [r for r, body in enumerate(bodies, 1) if target in collapse(body)]


def destroyed(bodies: Iterable[str], questions: Iterable[Question]) -> list[str]:
    """Truth ids whose needle is in no chunk at all: no retriever can ever find them."""
    collapsed = [collapse(b) for b in bodies]
    by_truth = {q.truth: collapse(q.needle) for q in questions}
    return sorted(t for t, n in by_truth.items() if not any(n in b for b in collapsed))


@dataclass(frozen=True)
class NeedleProblem:
    truth: str
    problem: str


def check_needles(extracted: dict[str, Extracted], questions: Iterable[Question]) -> list[NeedleProblem]:
    """Ground-truth rules, checked on the canonical texts: each needle occurs exactly once in the corpus,
    in its `source` file, and not inside a heading line. `extracted` maps file name to its extraction."""
    problems: list[NeedleProblem] = []
    collapsed_bodies: dict[str, list[str]] = {}
    for name, ext in extracted.items():
        # Body text of each section, headings left out, so a heading-only needle counts as absent.
        collapsed_bodies[name] = [collapse(ext.text[s.body_start:s.end]) for s in ext.sections] or [collapse(ext.text)]
    seen: set[str] = set()
    for q in questions:
        if q.truth in seen:
            continue
        seen.add(q.truth)
        n = collapse(q.needle)
        counts = {name: sum(b.count(n) for b in bodies) for name, bodies in collapsed_bodies.items()}
        total = sum(counts.values())
        in_heading = any(n in collapse(ext.text[s.start:s.body_start]) for ext in extracted.values()
                         for s in ext.sections)
        if total == 0:
            problems.append(NeedleProblem(q.truth, "only in a heading" if in_heading else "not in the corpus"))
        elif total > 1:
            problems.append(NeedleProblem(q.truth, f"occurs {total} times"))
        elif q.source in counts and counts[q.source] == 0:
            found = next(name for name, c in counts.items() if c)
            problems.append(NeedleProblem(q.truth, f"found in {found}, not in its source {q.source}"))
    return problems
