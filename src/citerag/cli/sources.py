"""`citerag sources add | list | show | sync | remove`: folders, Git repositories and websites synced into a
collection (citerag.app.sources), with their schedules and status."""

from __future__ import annotations

import json
from typing import Any

import click

from citerag.app import sources
from citerag.app.home import Citerag
from citerag.cli.options import index_option, json_option
from citerag.errors import CiteragError
from citerag.settings import load_settings
from citerag.types import SourceInfo

collection_option = click.option("--collection", default=None, help="A collection of the index (default: its home).")


def _duration(text: str | None) -> float | None:
    """'90', '90s', '15m', '6h', '1d' as seconds."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        return float(number) * units[unit]
    except ValueError:
        raise CiteragError(f"--every {text!r}: a number of seconds, or with s, m, h or d (15m, 6h)") from None


@click.group("sources")
def sources_group() -> None:
    """Folders, Git repositories and websites kept in sync with a collection."""


@sources_group.command("add")
@click.argument("name")
@click.option("--folder", metavar="PATH", help="A folder on this machine.")
@click.option("--git", metavar="URL", help="A Git repository (file://, git://, https://, ssh).")
@click.option("--web", metavar="URL", help="A website, crawled from this URL.")
@click.option("--branch", help="Git: the branch (default: the remote's HEAD).")
@click.option("--path", "globs", multiple=True, metavar="GLOB",
              help="Folder or Git: only paths matching (docs/**/*.md); repeat for several.")
@click.option("--link", metavar="TEMPLATE",
              help="Git: the file's page on a forge, with {commit}, {path} and {branch} "
                   "(https://forge/repo/blob/{commit}/{path}).")
@click.option("--sitemap", metavar="URL", help="Web: the sitemap listing the pages (its lastmod spares requests).")
@click.option("--prefix", metavar="URL", help="Web: only URLs under this prefix (default: the URL's folder).")
@click.option("--rate", type=float, help="Web: requests per second per host at most (default 4).")
@click.option("--max-pages", type=int, help="Web: pages per sync at most (default 500).")
@click.option("--watch", is_flag=True, help="Folder: while a server runs, sync within seconds of a change.")
@click.option("--tag", "tags", multiple=True, metavar="GLOB=TAG",
              help="Tag the documents whose path (or URL) matches, for `--filter tags=TAG` (docs/runbooks/**=sre); "
                   "repeat for several. With rules, a document's tags are the rules' at each sync.")
@click.option("--group", "groups", multiple=True, metavar="GLOB=GROUP",
              help="Let only GROUP read the documents whose path (or URL) matches (hr/**=hr); repeat for several. "
                   "With rules, a document's groups are the rules' at each sync (none matching: everyone).")
@click.option("--every", metavar="DURATION", help="Sync on this interval (90s, 15m, 6h, 1d) when a server runs.")
@click.option("--cron", metavar="EXPR", help="Or on this cron expression (minute hour day month weekday).")
@index_option
@collection_option
def add_command(name: str, folder: str | None, git: str | None, web: str | None, branch: str | None,
                globs: tuple[str, ...], link: str | None, sitemap: str | None, prefix: str | None,
                rate: float | None, max_pages: int | None, watch: bool, tags: tuple[str, ...], groups: tuple[str, ...],
                every: str | None,
                cron: str | None, index: str | None, collection: str | None) -> None:
    """Add a source (then `citerag sources sync NAME`, or let a server sync it on its schedule)."""
    given = [(k, v) for k, v in (("folder", folder), ("git", git), ("web", web)) if v]
    if len(given) != 1:
        raise CiteragError("give one of --folder PATH, --git URL or --web URL")
    kind, location = given[0]
    options: dict[str, Any] = {k: v for k, v in (("branch", branch), ("globs", list(globs) or None),
                                                 ("link", link), ("sitemap", sitemap), ("prefix", prefix),
                                                 ("rate", rate), ("max_pages", max_pages),
                                                 ("watch", watch or None)) if v is not None}
    if tags:
        options["tags"] = [list(t.rpartition("=")[::2]) if "=" in t else [t, ""] for t in tags]
    if groups:
        options["groups"] = [list(g.rpartition("=")[::2]) if "=" in g else [g, ""] for g in groups]
    info = SourceInfo(name, kind, location, options, _duration(every), cron)
    with Citerag.open(load_settings(index), create=True) as app:
        added = sources.add(app.collection(collection), info)
    schedule = f"every {added.interval_s:g} s" if added.interval_s else f"on {added.cron}" if added.cron else \
        "when asked"
    click.echo(f"added {kind} source {added.name}: {added.location} (synced {schedule})")


@sources_group.command("list")
@index_option
@collection_option
@json_option("The sources as JSON.")
def list_command(index: str | None, collection: str | None, as_json: bool) -> None:
    """Every source of the collection with its last sync."""
    with Citerag.open(load_settings(index)) as app:
        found = [sources.view(s) for s in app.collection(collection).store.sources()]
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for s in found:
        state = f"error: {s['last_error']}" if s["last_error"] else f"synced {s['last_success'] or 'never'}"
        click.echo(f"{s['name']}  {s['kind']}  {s['location']}  {s['documents']} documents  {state}")


@sources_group.command("show")
@click.argument("name")
@index_option
@collection_option
@json_option("The source as JSON.")
def show_command(name: str, index: str | None, collection: str | None, as_json: bool) -> None:
    """A source's configuration and status: last attempt and success, counts, last error, next run."""
    with Citerag.open(load_settings(index)) as app:
        s = sources.view(sources.get(app.collection(collection), name))
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    for key in ("name", "kind", "location", "options", "interval_s", "cron", "documents", "commit", "last_attempt",
                "last_success", "last", "complete", "last_error", "failures", "next_run"):
        if s[key] not in (None, {}, ""):
            click.echo(f"{key}: {s[key]}")


@sources_group.command("sync")
@click.argument("name")
@index_option
@collection_option
@json_option("The sync's report as JSON.")
def sync_command(name: str, index: str | None, collection: str | None, as_json: bool) -> None:
    """Sync a source now: new and changed documents indexed, removed ones deleted."""
    with Citerag.open(load_settings(index)) as app:
        report = sources.sync(app.collection(collection), name)
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        click.echo(f"{name}: {report.added} added, {report.changed} changed, {report.removed} removed, "
                   f"{report.unchanged} unchanged, {report.failed} failed ({report.fetched} fetched)"
                   + ("" if report.complete or report.error else "; incomplete pass, nothing removed"))
        for line in report.errors[:20]:
            click.echo(f"  failed: {line}", err=True)
    if report.error:
        raise CiteragError(f"source {name}: {report.error}")


@sources_group.command("remove")
@click.argument("name")
@index_option
@collection_option
def remove_command(name: str, index: str | None, collection: str | None) -> None:
    """Remove a source and the documents it holds (uploads and other sources' documents stay)."""
    with Citerag.open(load_settings(index)) as app:
        count = sources.remove(app.collection(collection), name)
    click.echo(f"removed source {name} and its {count} documents")
