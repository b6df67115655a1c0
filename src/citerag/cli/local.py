"""The commands over one local index: ingest, calibrate, retry, reindex, ask, search, chunk, status, train-reranker."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from citerag.app.files import chunk_file
from citerag.app.home import Citerag
from citerag.app.models import AskOptions, Filters, RefusalStatus, SearchOptions, checked_tags
from citerag.cli.options import (
    filter_option,
    generator_options,
    index_option,
    json_option,
    mode_option,
    rerank_option,
    shortlist_option,
    strategy_option,
)
from citerag.config_file import set_in_config_file
from citerag.ingest.files import IngestReport, discover
from citerag.refusal import RefusalRule
from citerag.settings import Settings, load_settings


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _progress(label: str) -> Any:
    def wrap(items: Iterable[Path]) -> Iterable[Path]:
        if not sys.stderr.isatty():
            return items
        from tqdm import tqdm

        return tqdm(list(items), desc=label, unit="doc", file=sys.stderr)

    return wrap


def _open(settings: Settings, create: bool = False) -> Citerag:
    return Citerag.open(settings, create=create)


def _print_report(report: IngestReport, as_json: bool) -> None:
    if as_json:
        _emit_json(report.as_json())
        return
    click.echo(f"indexed {len(report.indexed)}, unchanged {report.unchanged}, failed {len(report.failed)}, "
               f"removed {len(report.removed)}")
    if report.chunks:
        share = report.header_tokens / report.embedded_tokens if report.embedded_tokens else 0.0
        click.echo(f"{report.chunks} chunks; {report.over_window} over the encoder's word-piece window; "
                   f"header tokens {report.header_tokens} of {report.embedded_tokens} embedded ({share:.1%})")
    for path, reason in report.failed:
        click.echo(f"failed: {path}: {reason}")


def _echo_refusal_use(refusal: RefusalStatus) -> None:
    if refusal.rule == "calibrated":
        lexical = ("" if refusal.lexical_threshold is None else
                   f" or holds {refusal.lexical_threshold:.3f} of the question's lexical evidence")
        click.echo(f"in use: questions are refused unless a hit lies under cosine distance {refusal.threshold:.3f}"
                   + lexical)
    else:
        click.echo(f"in use: the threshold {refusal.threshold:g} ({refusal.reason})")


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option
@strategy_option(None, "Chunking strategy (default E).")
@json_option("Print the report as JSON.")
def ingest(paths: tuple[Path, ...], index: str | None, strategy: str | None, as_json: bool) -> None:
    """Index files and folders; re-running touches only what changed and drops what is gone."""
    settings = load_settings(index, strategy=strategy)
    found = discover(paths)  # before the index is created: a wrong path leaves nothing behind
    with _open(settings, create=True) as app:
        report = app.ingest(found, progress=_progress("ingest"))
        calibration = app.collection().last_calibration
    _print_report(report, as_json)
    if calibration is not None and not as_json:
        click.echo(f"refusal rule: {calibration.describe()}" if isinstance(calibration, RefusalRule)
                   else f"refusal rule not calibrated: {calibration}")


@click.command("calibrate")
@index_option
@json_option()
def calibrate(index: str | None, as_json: bool) -> None:
    """Fit the collection's refusal rule: synthetic questions from its own chunks against the shipped bank of
    out-of-domain questions; no labelled question needed. `ingest` does it after every run that changed documents."""
    with _open(load_settings(index)) as app:
        rule = app.collection().calibrate()
        refusal = app.collection().refusal_status(app.collection().settings)
    if as_json:
        _emit_json(refusal.as_json())
        return
    click.echo(f"refusal rule: {rule.describe()}")
    _echo_refusal_use(refusal)


@click.command("retry")
@index_option
@json_option()
def retry(index: str | None, as_json: bool) -> None:
    """Index again every document that failed (or was left pending)."""
    with _open(load_settings(index)) as app:
        _print_report(app.retry_failed(progress=_progress("retry")), as_json)


@click.command("reindex")
@index_option
@click.option("--stale", is_flag=True, required=True, help="Rebuild documents whose stamps differ from the "
              "current configuration.")
@json_option()
def reindex(index: str | None, stale: bool, as_json: bool) -> None:
    """Rebuild exactly the documents whose stamps no longer match the configuration."""
    with _open(load_settings(index)) as app:
        _print_report(app.reindex_stale(progress=_progress("reindex")), as_json)


@click.command("ask")
@click.argument("question")
@index_option
@json_option()
@click.option("--show-prompt", is_flag=True, help="Also print the prompt a generator would see.")
@mode_option
@click.option("--threshold", type=float, default=None, help="Cosine-distance cut of the gate.")
@rerank_option("Rerank the shortlist with this cross-encoder folder (see train-reranker); '' turns it off.")
@shortlist_option
@filter_option
@generator_options(default=None)
def ask(question: str, index: str | None, as_json: bool, show_prompt: bool, mode: str | None,
        threshold: float | None, rerank_model: str | None, shortlist: int | None, filters: Filters,
        generator: str | None, llm_model_path: str | None, openai_base_url: str | None, openai_model: str | None,
        generator_timeout: float | None) -> None:
    """Answer from the indexed documents with [n] citations, or NO ANSWER."""
    settings = load_settings(index, llm_model_path=llm_model_path, openai_base_url=openai_base_url,
                             openai_model=openai_model, generator_timeout=generator_timeout)
    options = AskOptions(mode=mode, threshold=threshold, rerank_model=rerank_model, shortlist=shortlist,
                         generator=generator, filters=filters)
    with _open(settings) as app:
        result = app.ask(question, options)
    if as_json:
        data = result.as_json()
        if show_prompt:
            data["prompt"] = result.prompt
        _emit_json(data)
        return
    if show_prompt and result.prompt:
        click.echo(result.prompt + "\n" + "-" * 72)
    click.echo(result.answer)
    if result.citations:
        click.echo("\nSources:")
        for c in result.citations:
            click.echo(f"[{c.index}] {c.document_name} > {c.locator_label}  "
                       f"{c.source_path}{c.fragment}  (distance {c.cosine_distance:.3f})"
                       + (f"\n    {c.live_url}" if c.live_url else ""))
    if result.check is not None:
        check = result.check
        if check.invalid:
            click.echo(f"\nremoved {len(check.invalid)} marker(s) naming no source: {' '.join(check.invalid)}")
        if check.flagged:
            click.echo("\nwarning: the answer cites no source; treat it as unsupported")
        elif check.unused:
            click.echo(f"\nunused sources: {' '.join(f'[{n}]' for n in check.unused)}")
        click.echo(f"citation accuracy {check.citation_accuracy:.0%} "
                   f"({check.cited_sentences} of {check.sentences} sentences cite a source)")


@click.command("search")
@click.argument("query")
@index_option
@mode_option
@click.option("--k", type=click.IntRange(1, 1000), default=None, help="Hits to show (the setting k, 20).")
@rerank_option("Rerank the first --shortlist hits with this cross-encoder folder; '' turns it off.")
@shortlist_option
@filter_option
@json_option()
def search(query: str, index: str | None, mode: str | None, k: int | None, rerank_model: str | None,
           shortlist: int | None, filters: Filters, as_json: bool) -> None:
    """Ranked chunks for a query, with the citation fields, rank, score and cosine distance."""
    with _open(load_settings(index)) as app:
        options = SearchOptions(mode=mode, k=k, rerank_model=rerank_model, shortlist=shortlist, filters=filters)
        rows = app.search(query, options).as_json()
    if as_json:
        _emit_json(rows)
        return
    for row in rows:
        snippet = " ".join(row["quote"].split())[:100]
        click.echo(f"{row['rank']:>3}  {row['score']:8.4f}  d={row['cosine_distance']:.3f}  "
                   f"{row['document_name']} > {row['locator_label']} {row['fragment']}\n     {snippet}")


@click.command("chunk")
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@strategy_option("E")
@click.option("--title", default=None, help="Document title for the header (default: file name without extension).")
@click.option("--target", type=click.IntRange(16, 100000), default=512, show_default=True)
@click.option("--overlap", type=click.IntRange(0, 10000), default=64, show_default=True)
@json_option()
def chunk(file: Path, strategy: str, title: str | None, target: int, overlap: int, as_json: bool) -> None:
    """Show how one file is cut: [{text, content, section, start, end}]."""
    chunks = chunk_file(file, strategy, target, overlap, title=title)
    if as_json:
        _emit_json([c.as_json() for c in chunks])
        return
    for c in chunks:
        click.echo(f"{c.start:>7}-{c.end:<7} [{c.section}] {' '.join(c.content.split())[:90]}")


@click.command("tag")
@click.argument("document")
@click.argument("tags", nargs=-1)
@index_option
@json_option()
def tag(document: str, tags: tuple[str, ...], index: str | None, as_json: bool) -> None:
    """Set a document's tags (none: clear them), for `--filter tags=T`; DOCUMENT is its id or its path."""
    with _open(load_settings(index)) as app:
        doc = app.tag(document, checked_tags(tags, "TAGS"))
    if as_json:
        _emit_json({"id": doc.id, "source_path": doc.source_path, "tags": doc.tags})
    else:
        click.echo(f"{doc.source_path}: {' '.join(doc.tags) if doc.tags else 'no tags'}")


@click.command("status")
@index_option
@json_option()
def status(index: str | None, as_json: bool) -> None:
    """Every document: status, error, chunk count, stamps, and whether it is stale."""
    with _open(load_settings(index)) as app:
        report = app.status()
    if as_json:
        _emit_json(report.as_json())
        return
    click.echo(f"{report.location}: " + ", ".join(f"{n} {s}" for s, n in report.counts.items()))
    if report.refusal is not None:
        rule = report.refusal.calibration
        click.echo(f"refusal rule: {rule.describe()}" if rule is not None else "refusal rule: not calibrated")
        _echo_refusal_use(report.refusal)
    if report.retriever is not None:
        click.echo(f"retriever: {report.retriever.describe()}")
    for note in report.notes:
        click.echo(note)
    for row in report.documents:
        d = row.document
        flag = " (stale)" if row.stale else ""
        click.echo(f"{d.status:<8} {d.chunk_count:>5}  {d.source_path}{flag}")
        if d.error:
            # An indexed document with an error is still served in its previous version.
            label = "newer version failed, previous one served" if d.status == "indexed" else "reason"
            click.echo(f"         {label}: {d.error}")
        for w in d.warnings:
            click.echo(f"         warning: {w}")


@click.command("train-reranker")
@index_option
@click.option("--out", "out", metavar="DIR", type=click.Path(path_type=Path), default=None,
              help="Model folder to write (default INDEX/reranker).")
@click.option("--pairs", type=click.IntRange(8, 1_000_000), default=3000, show_default=True,
              help="Training pairs (query, passage), positives and negatives together.")
@click.option("--epochs", type=click.IntRange(1, 100), default=1, show_default=True)
@click.option("--seed", type=int, default=13, show_default=True)
@click.option("--use", "use", is_flag=True, help="Also set rerank_model in INDEX/config.toml.")
@json_option()
def train_reranker(index: str | None, out: Path | None, pairs: int, epochs: int, seed: int, use: bool,
                   as_json: bool) -> None:
    """Fine-tune a cross-encoder reranker on the indexed corpus (from the packaged MiniLM; CPU, minutes)."""
    settings = load_settings(index)
    target = (out or settings.index_dir / "reranker").expanduser().resolve()
    with _open(settings) as app:
        report = app.collection().train_reranker(target, pairs, epochs, seed, lambda msg: click.echo(msg, err=True))
    if use:
        set_in_config_file(settings.index_dir, "rerank_model", str(target))
    if as_json:
        _emit_json(report.as_json())
        return
    click.echo(f"wrote {target}: {report.pairs} pairs from {report.chunks} chunks, {epochs} epoch(s), "
               f"{report.seconds_total:.0f}s (training {report.seconds_training:.0f}s); held-out synthetic groups: "
               f"top-1 {report.heldout_top1:.2f}, MRR {report.heldout_mrr:.3f}")
    click.echo(f"rerank_model in {settings.index_dir / 'config.toml'} now names it" if use else
               f"use it with: citerag ask --rerank {target} ...  (or rerank_model = \"{target}\" in config.toml)")


COMMANDS = [ingest, calibrate, retry, reindex, ask, search, tag, chunk, status, train_reranker]
