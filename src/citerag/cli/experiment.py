"""`citerag experiment start | stop | list | report | replay`: two pipeline arms of a collection on live traffic
(citerag.app.experiments) and what they did (citerag.eval.experiment_report)."""

from __future__ import annotations

import json
from typing import Any

import click

from citerag.app import experiments
from citerag.app.home import Citerag
from citerag.cli.options import index_option, json_option
from citerag.errors import CiteragError
from citerag.settings import load_settings

collection_option = click.option("--collection", default=None, help="A collection of the index (default: its home).")


def _arm(pairs: tuple[str, ...], which: str) -> dict[str, Any]:
    """OPTION=VALUE pairs as an arm's options; a value is JSON where it parses (numbers), else text."""
    arm: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CiteragError(f"--{which} takes OPTION=VALUE, not {pair!r}")
        try:
            arm[key] = json.loads(raw)
        except json.JSONDecodeError:
            arm[key] = raw
    return arm


@click.group("experiment")
def experiment_group() -> None:
    """Two pipeline arms on live traffic, a share of requests each, and the report per arm."""


@experiment_group.command("start")
@click.argument("name")
@click.option("--b", "b", multiple=True, metavar="OPTION=VALUE", required=True,
              help=f"Arm b's options ({', '.join(experiments.ARM_FIELDS)}); repeat for several.")
@click.option("--a", "a", multiple=True, metavar="OPTION=VALUE", help="Arm a's (default: the collection as set).")
@click.option("--split", type=float, default=0.5, show_default=True, help="The share of requests arm b gets.")
@click.option("--sticky", type=click.Choice(experiments.STICKY), default="key", show_default=True,
              help="What keeps its arm: an API key, or a conversation.")
@index_option
@collection_option
def start_command(name: str, b: tuple[str, ...], a: tuple[str, ...], split: float, sticky: str, index: str | None,
                  collection: str | None) -> None:
    """Start an experiment (one runs at a time per collection)."""
    with Citerag.open(load_settings(index)) as app:
        started = experiments.start(app.collection(collection), name, _arm(b, "b"), _arm(a, "a"), split, sticky)
    click.echo(f"started {started.name}: a {started.a or '(as set)'}, b {started.b}, b's share {started.split:.0%}, "
               f"sticky per {started.sticky}")


@experiment_group.command("stop")
@index_option
@collection_option
def stop_command(index: str | None, collection: str | None) -> None:
    """Stop the running experiment; its report stays available."""
    with Citerag.open(load_settings(index)) as app:
        stopped = experiments.stop(app.collection(collection))
    click.echo(f"stopped {stopped.name}" if stopped else "no experiment was running")


@experiment_group.command("list")
@index_option
@collection_option
def list_command(index: str | None, collection: str | None) -> None:
    """Every experiment of the collection, the newest first."""
    with Citerag.open(load_settings(index)) as app:
        found = app.collection(collection).store.experiments()
    for e in found:
        click.echo(f"{e.name}  {'running' if e.stopped_at is None else 'stopped ' + e.stopped_at}  "
                   f"a {e.a or '(as set)'}  b {e.b}  split {e.split}  sticky {e.sticky}  started {e.started_at}")


@experiment_group.command("report")
@click.argument("name", required=False)
@click.option("--price-in", type=float, default=None, help="Prompt tokens' price per million (for cost per query).")
@click.option("--price-out", type=float, default=None, help="Completion tokens' price per million.")
@index_option
@collection_option
@json_option("The report as JSON.")
def report_command(name: str | None, price_in: float | None, price_out: float | None, index: str | None,
                   collection: str | None, as_json: bool) -> None:
    """Per arm: requests, refusals, feedback, helpful share, latency, tokens and cost; tests between the arms."""
    from citerag.eval.experiment_report import Prices, report, report_lines  # scipy: not for every command's start

    prices = Prices(price_in or 0.0, price_out or 0.0) if price_in is not None or price_out is not None else None
    with Citerag.open(load_settings(index)) as app:
        data = report(app.collection(collection), name, prices)
    click.echo(json.dumps(data, indent=2) if as_json else "\n".join(report_lines(data)))


@experiment_group.command("replay")
@click.argument("name", required=False)
@click.option("--from", "source", type=click.Choice(["a", "b"]), required=True,
              help="The arm whose questions are asked again through the other arm.")
@index_option
@collection_option
@json_option("Every question's decision then and now, as JSON.")
def replay_command(name: str | None, source: str, index: str | None, collection: str | None,
                   as_json: bool) -> None:
    """One arm's traffic (questions whose text was kept) asked again through the other arm."""
    from citerag.eval.experiment_report import replay_arm

    with Citerag.open(load_settings(index)) as app:
        data = replay_arm(app.collection(collection), name, source)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{data['asked']} questions of arm {data['from']} asked through arm {data['through']}: "
               f"{data['decisions_changed']} decisions changed; refused {data['refused_then']} then, "
               f"{data['refused_now']} now")
