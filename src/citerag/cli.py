"""The `citerag` command line. Errors reach the user as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from citerag.app import (
    MODES,
    AskOptions,
    Citerag,
    IngestReport,
    RefusalRule,
    RefusalStatus,
    SearchOptions,
    Settings,
    chunk_file,
    discover,
    load_settings,
    set_in_config_file,
)
from citerag.cli_options import generator_options
from citerag.errors import CiteragError

index_option = click.option("--index", "index", metavar="DIR", default=None,
                            help="Index directory (default ./.citerag, or $CITERAG_HOME).")


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


class _OneLine(logging.Handler):
    """Library warnings (e.g. documents of another embedding model left out) as one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"{record.levelname.lower()}: {record.getMessage()}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="citerag")
def cli() -> None:
    """Answers over your own documents, every claim cited to an exact character range."""


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option
@click.option("--strategy", type=click.Choice(list("ABCDEFG")), default=None, help="Chunking strategy (default E).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
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


@cli.command()
@index_option
@click.option("--json", "as_json", is_flag=True)
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


def _echo_refusal_use(refusal: RefusalStatus) -> None:
    if refusal.rule == "calibrated":
        click.echo(f"in use: questions are refused unless a hit lies under cosine distance {refusal.threshold:.3f}")
    else:
        click.echo(f"in use: the threshold {refusal.threshold:g} ({refusal.reason})")


@cli.command()
@index_option
@click.option("--json", "as_json", is_flag=True)
def retry(index: str | None, as_json: bool) -> None:
    """Index again every document that failed (or was left pending)."""
    with _open(load_settings(index)) as app:
        _print_report(app.retry_failed(progress=_progress("retry")), as_json)


@cli.command()
@index_option
@click.option("--stale", is_flag=True, required=True, help="Rebuild documents whose stamps differ from the "
              "current configuration.")
@click.option("--json", "as_json", is_flag=True)
def reindex(index: str | None, stale: bool, as_json: bool) -> None:
    """Rebuild exactly the documents whose stamps no longer match the configuration."""
    with _open(load_settings(index)) as app:
        _print_report(app.reindex_stale(progress=_progress("reindex")), as_json)


@cli.command()
@click.argument("question")
@index_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--show-prompt", is_flag=True, help="Also print the prompt a generator would see.")
@click.option("--mode", type=click.Choice(list(MODES)), default=None)
@click.option("--threshold", type=float, default=None, help="Cosine-distance cut of the gate.")
@click.option("--rerank", "rerank_model", metavar="MODEL_DIR", default=None,
              help="Rerank the shortlist with this cross-encoder folder (see train-reranker); '' turns it off.")
@click.option("--shortlist", type=click.IntRange(1, 1000), default=None, help="Hits the reranker scores (25).")
@generator_options(default=None)
def ask(question: str, index: str | None, as_json: bool, show_prompt: bool, mode: str | None,
        threshold: float | None, rerank_model: str | None, shortlist: int | None, generator: str | None,
        llm_model_path: str | None, openai_base_url: str | None, openai_model: str | None,
        generator_timeout: float | None) -> None:
    """Answer from the indexed documents with [n] citations, or NO ANSWER."""
    settings = load_settings(index, llm_model_path=llm_model_path, openai_base_url=openai_base_url,
                             openai_model=openai_model, generator_timeout=generator_timeout)
    options = AskOptions(mode=mode, threshold=threshold, rerank_model=rerank_model, shortlist=shortlist,
                         generator=generator)
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
                       f"{c.source_path}{c.fragment}  (distance {c.cosine_distance:.3f})")
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


@cli.command()
@click.argument("query")
@index_option
@click.option("--mode", type=click.Choice(list(MODES)), default=None)
@click.option("--k", type=click.IntRange(1, 1000), default=None, help="Hits to show (the setting k, 20).")
@click.option("--rerank", "rerank_model", metavar="MODEL_DIR", default=None,
              help="Rerank the first --shortlist hits with this cross-encoder folder; '' turns it off.")
@click.option("--shortlist", type=click.IntRange(1, 1000), default=None, help="Hits the reranker scores (25).")
@click.option("--json", "as_json", is_flag=True)
def search(query: str, index: str | None, mode: str | None, k: int | None, rerank_model: str | None,
           shortlist: int | None, as_json: bool) -> None:
    """Ranked chunks for a query, with the citation fields, rank, score and cosine distance."""
    with _open(load_settings(index)) as app:
        options = SearchOptions(mode=mode, k=k, rerank_model=rerank_model, shortlist=shortlist)
        rows = app.search(query, options).as_json()
    if as_json:
        _emit_json(rows)
        return
    for row in rows:
        snippet = " ".join(row["quote"].split())[:100]
        click.echo(f"{row['rank']:>3}  {row['score']:8.4f}  d={row['cosine_distance']:.3f}  "
                   f"{row['document_name']} > {row['locator_label']} {row['fragment']}\n     {snippet}")


@cli.command()
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--strategy", type=click.Choice(list("ABCDEFG")), default="E", show_default=True)
@click.option("--title", default=None, help="Document title for the header (default: file name without extension).")
@click.option("--target", type=click.IntRange(16, 100000), default=512, show_default=True)
@click.option("--overlap", type=click.IntRange(0, 10000), default=64, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def chunk(file: Path, strategy: str, title: str | None, target: int, overlap: int, as_json: bool) -> None:
    """Show how one file is cut: [{text, content, section, start, end}]."""
    chunks = chunk_file(file, strategy, target, overlap, title=title)
    if as_json:
        _emit_json([c.as_json() for c in chunks])
        return
    for c in chunks:
        click.echo(f"{c.start:>7}-{c.end:<7} [{c.section}] {' '.join(c.content.split())[:90]}")


@cli.command()
@index_option
@click.option("--json", "as_json", is_flag=True)
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


from citerag.cli_ops import slo_rules_command  # noqa: E402
from citerag.cli_service import keys_group, serve_command  # noqa: E402
from citerag.cli_trace import replay_command, trace_group  # noqa: E402
from citerag.cli_worker import worker_command  # noqa: E402
from citerag.eval.command import eval_command  # noqa: E402

cli.add_command(eval_command)
cli.add_command(serve_command)
cli.add_command(slo_rules_command)
cli.add_command(keys_group)
cli.add_command(trace_group)
cli.add_command(replay_command)
cli.add_command(worker_command)


@click.command("train-reranker")
@index_option
@click.option("--out", "out", metavar="DIR", type=click.Path(path_type=Path), default=None,
              help="Model folder to write (default INDEX/reranker).")
@click.option("--pairs", type=click.IntRange(8, 1_000_000), default=3000, show_default=True,
              help="Training pairs (query, passage), positives and negatives together.")
@click.option("--epochs", type=click.IntRange(1, 100), default=1, show_default=True)
@click.option("--seed", type=int, default=13, show_default=True)
@click.option("--use", "use", is_flag=True, help="Also set rerank_model in INDEX/config.toml.")
@click.option("--json", "as_json", is_flag=True)
def train_reranker_command(index: str | None, out: Path | None, pairs: int, epochs: int, seed: int, use: bool,
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


cli.add_command(train_reranker_command)


def main() -> None:
    logger = logging.getLogger("citerag")
    if not logger.handlers:
        logger.addHandler(_OneLine(logging.WARNING))
        logger.propagate = False
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except CiteragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the last resort: still one line, unless asked for the traceback
        if os.environ.get("CITERAG_DEBUG"):
            raise
        click.echo(f"error: internal error ({type(exc).__name__}: {exc}); set CITERAG_DEBUG=1 for details",
                   err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
