"""`citerag trace show ID` and `citerag replay ID`: a kept trace (citerag.trace.store) read back, and its query
asked again against today's index, printing what changed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from citerag.app.home import Citerag
from citerag.cli.options import index_option, json_option
from citerag.errors import CiteragError
from citerag.eval.replay import replay
from citerag.settings import load_settings


@click.group("trace")
def trace_group() -> None:
    """Traces kept in the index: every query and indexed document, its spans per stage (trace_keep newest)."""


@trace_group.command("show")
@click.argument("trace_id")
@index_option
@json_option("The whole record as JSON.")
def trace_show(trace_id: str, index: str | None, as_json: bool) -> None:
    """A kept trace: its operation, options and spans with their timings and attributes."""
    with Citerag.open(load_settings(index)) as app:
        record = app.collection().trace(trace_id)
    if record is None:
        raise CiteragError(f"no trace {trace_id} in this index")
    if as_json:
        click.echo(json.dumps(record, ensure_ascii=False, indent=2))
        return
    click.echo(f"trace {record['trace_id']}  {record['operation']}  collection {record['collection']}")
    click.echo("options: " + json.dumps(record["options"], ensure_ascii=False))
    if record.get("text_kept"):
        # A conversation's turn: the words asked, then the standalone query that was searched and answered.
        labels = {"asked": "asked", "question": "searched" if "asked" in record else "question", "answer": "answer"}
        for key, label in labels.items():
            if record.get(key) is not None:
                click.echo(f"{label}: {record[key]}")
    for given in record.get("feedback", []):
        click.echo(f"feedback: {feedback_line(given)}")
    depth: dict[str | None, int] = {}
    for span in record["spans"]:
        level = depth.get(span["parent_id"], -1) + 1
        depth[span["span_id"]] = level
        click.echo(f"{'  ' * level}{span['name']}  {span['duration_ms']:.1f} ms  {span['status']}")
        for key, value in span["attributes"].items():
            click.echo(f"{'  ' * level}  {key} = {json.dumps(value, ensure_ascii=False)}")


def feedback_line(given: dict[str, Any]) -> str:
    """One piece of feedback on a line: the verdict, the source named, who and when, the comment."""
    verdict = "helpful" if given.get("helpful") else "not helpful"
    source = f", source [{given['source']}] right" if given.get("source") else \
        (", no source right" if given.get("none_right") else "")
    when = datetime.fromtimestamp(float(given.get("at", 0)), UTC).isoformat(timespec="seconds")
    comment = f": {json.dumps(given['comment'], ensure_ascii=False)}" if given.get("comment") else ""
    return f"{verdict}{source} (by {given.get('by', '?')}, {when}){comment}"


@click.command("replay")
@click.argument("trace_id")
@index_option
def replay_command(trace_id: str, index: str | None) -> None:
    """Run a kept query again with its options against today's index; print what changed."""
    with Citerag.open(load_settings(index)) as app:
        collection = app.collection()
        record = collection.trace(trace_id)
        if record is None:
            raise CiteragError(f"no trace {trace_id} in this index")
        result = replay(collection, record)
    for line in result.lines():
        click.echo(line)
