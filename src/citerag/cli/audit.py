"""`citerag audit`: the home's audit trail (citerag.audit, docs/audit.md), newest first, filtered as the admin
routes are (GET /v1/audit). One line per event, or JSON lines with --json."""

from __future__ import annotations

import json
from contextlib import closing
from typing import Any

import click

from citerag.app.home import open_audit_log
from citerag.audit.base import ACTIONS, FAMILIES, MAX_LIMIT, AuditEvent, AuditQuery, AuditQueryError
from citerag.cli.options import index_option, json_option
from citerag.settings import load_settings


def _checked(_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A filter checked as the query checks it. A bad one is one line naming the option (an AuditQueryError, which
    the CLI prints as one line: a click usage error would print the usage too)."""
    if value is None:
        return None
    name = str(param.name)
    if name in ("document", "limit"):
        try:
            value = int(value)
        except ValueError:
            raise AuditQueryError(f"--{name}", f"expected a whole number, not {value!r}") from None
    try:
        AuditQuery.parse(**{name: value})
    except AuditQueryError as exc:
        raise AuditQueryError(f"--{name}", exc.reason) from None
    return value


@click.command("audit")
@index_option
@click.option("--collection", default=None, callback=_checked, metavar="NAME", help="Events of this collection only.")
@click.option("--principal", default=None, callback=_checked, metavar="WHO",
              help="Events of this principal only: key:PREFIX, user:NAME or local.")
@click.option("--action", default=None, callback=_checked, metavar="ACTION",
              help=f"An action ({', '.join(ACTIONS)}) or a family ({', '.join(FAMILIES)}).")
@click.option("--document", default=None, callback=_checked, metavar="ID", help="Events that name this document id.")
@click.option("--since", default=None, callback=_checked, metavar="ISO",
              help="Events at or after this time (ISO 8601: 2025-05-01 or 2025-05-01T12:00:00Z; UTC by default).")
@click.option("--until", default=None, callback=_checked, metavar="ISO", help="Events before this time.")
@click.option("--limit", default="100", callback=_checked, metavar="N", show_default=True,
              help=f"The newest this many events (at most {MAX_LIMIT}).")
@json_option("One JSON object per event and line.")
def audit_command(index: str | None, collection: str | None, principal: str | None, action: str | None,
                  document: int | None, since: str | None, until: str | None, limit: int, as_json: bool) -> None:
    """Who asked what, which documents were returned or opened, permission and key changes: newest first."""
    try:
        AuditQuery.parse(since=since, until=until)
    except AuditQueryError as exc:  # each was fine alone: their order is not
        raise AuditQueryError(f"--{exc.field}", exc.reason) from None
    with closing(open_audit_log(load_settings(index))) as audit:
        if audit.retention_days == 0:
            click.echo("the audit trail is off (audit_retention_days = 0): nothing is kept", err=True)
        events = audit.query(collection=collection, principal=principal, action=action, document=document,
                             since=since, until=until, limit=limit)
    for found in events:
        click.echo(json.dumps(found.as_json(), ensure_ascii=False) if as_json else line(found))
    if not events and not as_json:
        click.echo("no audit events match", err=True)


def line(found: AuditEvent) -> str:
    """An event on one line: time, principal, action, collection, trace id, documents, detail ('-': none)."""
    documents = ",".join(str(d) for d in found.documents) or "-"
    detail = json.dumps(found.detail, ensure_ascii=False, sort_keys=True) if found.detail else "-"
    return "  ".join([found.at, found.principal, found.action, found.collection or "-", found.trace_id or "-",
                      documents, detail])
