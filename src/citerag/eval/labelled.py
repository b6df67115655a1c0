"""A collection's labelled production questions written out as a dev set that `citerag eval --dev-set` and the CI
gate read unchanged: corpus/ (the original bytes of every indexed document), questions.jsonl (one per needle
label: the question, the needle as it stands in the document's text, the corpus file that holds it), ood.jsonl
(the out-of-domain labels) and devset.json (where it came from and when).

The corpus is the whole collection, not only the documents holding needles, so that retrieval is measured against
everything a production question was searched in. A label whose document has since been deleted, or whose needle
is no longer in the document's current text (it was replaced), is left out and counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from citerag.app.collection import Collection
from citerag.errors import CiteragError
from citerag.types import Document


@dataclass(frozen=True)
class Exported:
    folder: Path
    documents: int
    questions: int
    ood: int
    left_out: list[str]  # why each label not written was left out


def _file_name(doc: Document, taken: set[str]) -> str:
    """The document's name as a corpus file name: its base name (safe characters), made unique by its id."""
    base = re.sub(r"[^\w.\-]+", "_", PurePosixPath(doc.name).name).lstrip(".") or f"document-{doc.id}"
    name = base if base.casefold() not in taken else f"{doc.id}-{base}"
    taken.add(name.casefold())
    return name


def export(collection: Collection, out: Path) -> Exported:
    """Write the dev set into `out` (created; it must not hold a dev set already)."""
    if (out / "questions.jsonl").exists() or (out / "corpus").exists():
        raise CiteragError(f"{out} already holds a dev set: export into a new folder")
    labels = collection.store.labels()
    if not labels:
        raise CiteragError(f"collection {collection.name!r} has no labelled questions: label some first "
                           "(citerag label)")
    documents = [d for d in collection.store.documents() if d.status == "indexed"]
    corpus = out / "corpus"
    corpus.mkdir(parents=True)
    names: dict[int, str] = {}
    taken: set[str] = set()
    for doc in documents:
        data = collection.read_original(doc)
        if data is None:  # the CLI indexed it from a path that is gone: it cannot be in the corpus
            continue
        names[doc.id] = _file_name(doc, taken)
        (corpus / names[doc.id]).write_bytes(data)
    with collection.store.view() as view:
        texts = view.texts(names)
    questions, ood, left_out = [], [], []
    for label in labels:
        qid = f"prod-{label.trace_id[:12]}"
        if label.kind == "ood":
            ood.append({"id": qid, "kind": "production", "query": label.question})
            continue
        text = texts.get(label.document_id or -1)
        if text is None:
            left_out.append(f"{qid}: document {label.document_id} is no longer in the collection")
            continue
        if label.needle not in text:
            left_out.append(f"{qid}: its needle is no longer in document {label.document_id} (replaced)")
            continue
        questions.append({"id": qid, "truth": qid, "style": "production", "query": label.question,
                          "needle": label.needle, "source": names[label.document_id or -1],
                          "asked_at": label.asked_at, "labelled_by": label.by})
    _write_jsonl(out / "questions.jsonl", questions)
    if ood:
        _write_jsonl(out / "ood.jsonl", ood)
    (out / "devset.json").write_text(json.dumps({
        "collection": collection.name, "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "labels": len(labels), "questions": len(questions), "ood": len(ood), "left_out": left_out,
        "asked_from": _when(min(label.asked_at for label in labels)),
        "asked_to": _when(max(label.asked_at for label in labels))}, indent=2) + "\n", encoding="utf-8")
    return Exported(out, len(names), len(questions), len(ood), left_out)


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
