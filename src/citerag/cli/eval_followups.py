"""`citerag eval --conversations FILE`: follow-up retrieval, three arms, written as followups.json and .md."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from citerag.answer.followup import PastTurn, condensed_query, folded_query
from citerag.answer.generators.base import GeneratorError
from citerag.app.home import Citerag
from citerag.errors import CiteragError
from citerag.eval.conversations import load_conversations
from citerag.eval.followups import Rewrite, evaluate_followups, followups_markdown
from citerag.eval.needle import check_needles, chunk_body
from citerag.eval.runner import build_index, corpus_files, extract_corpus
from citerag.settings import Settings
from citerag.text import collapse


def _llm_name(settings: Settings, generator: Any) -> str | None:
    if settings.generator == "llama":
        return f"llama ({Path(str(getattr(generator, 'model_path', settings.llm_model_path))).name}, in process)"
    if settings.generator == "openai":
        return f"openai ({settings.openai_model or 'the server default model'} at {settings.openai_base_url})"
    return None


def run_followups(app: Citerag, settings: Settings, corpus: Path, exclude: Sequence[str], path: Path, out: Path,
                  cache: Path, strategy: str, mode: str, embedder: str) -> None:
    conversations = load_conversations(path)
    log = lambda s: click.echo(s, err=True)  # noqa: E731
    files = corpus_files(corpus, exclude)
    for p in check_needles(extract_corpus(files), [c.last for c in conversations]):
        log(f"ground truth: {p.truth}: {p.problem}")
    _, collection = build_index(app, settings, files, cache, embedder, strategy, [], log)
    chunks, documents = collection.indexed_chunks()
    bodies = {c.id: collapse(chunk_body(c, documents[c.document_id])) for c in chunks}
    rewrite: Rewrite | None = None
    name = None
    failures = [0]
    if settings.generator in ("llama", "openai"):
        generator = collection.generator()
        name = _llm_name(settings, generator)

        def llm(history: Sequence[PastTurn], question: str) -> str:
            try:
                return condensed_query(generator.complete, history, question)
            except GeneratorError as exc:  # counted and said; the fold stands in, as in a conversation
                failures[0] += 1
                log(f"llm rewrite failed: {exc}")
                return folded_query(history, question)

        rewrite = llm
    report = evaluate_followups(collection, conversations, mode=mode, bodies=bodies, llm=rewrite, llm_name=name,
                                log=log)
    report.update(name=path.parent.name or path.name, conversations=str(path),
                  configuration=f"{strategy}/{mode}/{embedder}",
                  llm_failures=failures[0] if rewrite is not None else None)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "followups.json").write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        (out / "followups.md").write_text(followups_markdown(report), encoding="utf-8")
    except OSError as exc:
        raise CiteragError(f"cannot write the report to {out}: {exc.strerror}") from exc
    click.echo(followups_markdown(report))
    click.echo(f"wrote {out / 'followups.json'} and followups.md")
