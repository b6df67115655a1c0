"""`citerag label`: production questions (kept answers whose text was kept) labelled one by one at the terminal,
and `citerag label export --out DIR`, a dev set `citerag eval --dev-set DIR` reads (citerag.app.labels,
citerag.eval.labelled)."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from citerag.app import labels
from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.cli.options import index_option
from citerag.errors import CiteragError
from citerag.eval.labelled import export
from citerag.settings import load_settings

collection_option = click.option("--collection", default=None, help="A collection of the index (default: its home).")


@click.group("label", invoke_without_command=True)
@index_option
@collection_option
@click.option("--sample", "n", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Questions to label, spread evenly over the time asked.")
@click.option("--days", type=click.IntRange(1, 3650), default=None,
              help="Only questions asked in the last DAYS days (default: every kept answer).")
@click.option("--seed", type=int, default=0, show_default=True, help="The sample's random seed.")
@click.pass_context
def label_group(ctx: click.Context, index: str | None, collection: str | None, n: int, days: int | None,
                seed: int) -> None:
    """Label sampled production questions: the passage that answers each (a span of it) or out of domain."""
    if ctx.invoked_subcommand is not None:
        return
    since = (datetime.now(UTC) - timedelta(days=days)).timestamp() if days else 0.0
    with Citerag.open(load_settings(index)) as app:
        target = app.collection(collection)
        found = labels.candidates(target, n, since, seed)
        if not found:
            raise CiteragError("no answers to label: questions are kept only where trace_text = true, and each "
                               "is labelled once")
        done = 0
        for i, candidate in enumerate(found, 1):
            outcome = _one(target, candidate, i, len(found))
            if outcome == "quit":
                break
            done += outcome == "labelled"
        total = len(target.store.labels())
    click.echo(f"{done} labelled; {total} in all. Write them out with `citerag label export --out DIR`.")


def _one(collection: Collection, c: labels.Candidate, i: int, total: int) -> str:
    when = datetime.fromtimestamp(c.asked_at, UTC).isoformat(timespec="minutes")
    click.echo(f"\n[{i}/{total}] asked {when}  (trace {c.trace_id})")
    for given in c.feedback:
        click.echo("  feedback: " + ("helpful" if given.get("helpful") else "not helpful")
                   + (f", source [{given['source']}] right" if given.get("source") else "")
                   + (", no source right" if given.get("none_right") else ""))
    click.echo(f"Q: {c.question}")
    for n, p in enumerate(c.passages, 1):
        mark = " (feedback: right)" if c.suggested == n - 1 else ""
        click.echo(f"  {n}. {p.document_name} · {p.section} · rank {p.rank}{mark}")
        click.echo(textwrap.indent(textwrap.fill(" ".join(p.text.split())[:700], 100), "     "))
    default = str(c.suggested + 1) if c.suggested is not None else "s"
    choices = [str(n) for n in range(1, len(c.passages) + 1)] + ["o", "s", "q"]
    pick = click.prompt("Which passage answers it? (number, o = out of domain, s = skip, q = quit)",
                        type=click.Choice(choices), default=default, show_choices=False)
    if pick == "q":
        return "quit"
    if pick == "s":
        return "skipped"
    if pick == "o":
        labels.label(collection, c.trace_id, "local", ood=True)
        click.echo("  kept: out of domain")
        return "labelled"
    passage = c.passages[int(pick) - 1]
    while True:
        words = click.prompt("Paste the words of it that answer the question (Enter: the whole passage)",
                             default="", show_default=False)
        span = labels.find_span(passage, words) if words.strip() else (passage.start, passage.end)
        if span is None:
            click.echo("  those words are not in the passage; try again")
            continue
        try:
            kept = labels.label(collection, c.trace_id, "local", document_id=passage.document_id, start=span[0],
                                end=span[1])
        except labels.LabelError as exc:
            click.echo(f"  {exc}; try again")
            continue
        click.echo(f"  kept: {kept.needle[:80]!r}")
        return "labelled"


@label_group.command("export")
@index_option
@collection_option
@click.option("--out", "out", required=True, metavar="DIR", help="A new folder for the dev set.")
def export_command(index: str | None, collection: str | None, out: str) -> None:
    """Write the labels as a dev set: corpus/, questions.jsonl, ood.jsonl, devset.json."""
    with Citerag.open(load_settings(index)) as app:
        done = export(app.collection(collection), Path(out))
    click.echo(f"wrote {done.folder}: {done.documents} documents, {done.questions} questions, {done.ood} "
               "out of domain" + (f"; left out {len(done.left_out)}:" if done.left_out else ""))
    for why in done.left_out:
        click.echo(f"  {why}")
