"""A dev-set folder: what `citerag eval --dev-set DIR` reads (corpus, questions, out-of-domain questions, phrases)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citerag.errors import CiteragError


@dataclass(frozen=True)
class DevSet:
    corpus: Path
    questions: Path
    ood: Path | None
    phrases: Path | None
    exclude: tuple[str, ...]


def dev_set(folder: Path) -> DevSet:
    """A dev-set folder: corpus/, questions.jsonl, and if present ood.jsonl, phrases.jsonl and devset.json.
    devset.json may hold {"exclude": [globs]} (files of the corpus the set is not measured on, such as another
    edition) and {"corpus": "../other/corpus"} (a cross-lingual set asks its questions over another set's
    corpus, relative to the folder, rather than carrying a second copy)."""
    data: dict[str, Any] = {}
    if (manifest := folder / "devset.json").is_file():
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            exclude = tuple(str(g) for g in data.get("exclude", []))
            corpus = folder / str(data.get("corpus", "corpus"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError) as exc:
            raise CiteragError(f"cannot read {manifest}: {exc}") from exc
    else:
        exclude, corpus = (), folder / "corpus"
    if not corpus.is_dir() or not (folder / "questions.jsonl").is_file():
        raise CiteragError(f"{folder} is not a dev set: it needs a corpus ({corpus}) and questions.jsonl")
    ood, phrases = folder / "ood.jsonl", folder / "phrases.jsonl"
    return DevSet(corpus, folder / "questions.jsonl", ood if ood.is_file() else None,
                  phrases if phrases.is_file() else None, exclude)
