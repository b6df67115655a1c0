"""Who may read what (issue 30): users and their groups (`citerag users`), and the groups that may read a document
(`citerag restrict`). Keys are made by `citerag keys create --user NAME` or `--group GROUP` (citerag.cli.serve)."""

from __future__ import annotations

import json
from contextlib import closing
from typing import Any

import click

from citerag.app.home import Citerag, open_audit_log, open_key_store
from citerag.app.models import checked_groups
from citerag.audit.base import event
from citerag.cli.options import index_option, json_option
from citerag.errors import CiteragError
from citerag.settings import Settings, load_settings


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def audited(settings: Settings, action: str, collection: str | None = None, documents: tuple[int, ...] = (),
            **detail: Any) -> None:
    """The change in the home's audit trail, by the local operator (`local`: whoever runs the CLI here)."""
    with closing(open_audit_log(settings)) as trail:
        trail.record(event("local", action, collection, None, documents, **detail))


@click.group("users")
def users_group() -> None:
    """Users and their groups: a user's keys, and its sessions once signed in, read the documents open to everyone
    and those of its groups."""


@users_group.command("add")
@click.argument("name")
@click.option("--group", "groups", multiple=True, help="A group the user is in (repeat the option).")
@index_option
def users_add(name: str, groups: tuple[str, ...], index: str | None) -> None:
    """Add the user, or replace its groups; its keys and sessions read with them from the next request on."""
    if not name.strip() or len(name) > 200 or any(not c.isprintable() for c in name):
        raise CiteragError(f"NAME: {name[:40]!r} is not a user name (printable, at most 200 characters)")
    settings = load_settings(index)
    with closing(open_key_store(settings)) as keys:
        existed = any(u.name == name for u in keys.users())
        user = keys.put_user(name, checked_groups(groups, "--group"))
    audited(settings, "user.update" if existed else "user.create", user=name, groups=list(user.groups))
    click.echo(f"{user.name}: {' '.join(user.groups) or 'no groups'}")


@users_group.command("list")
@index_option
@json_option()
def users_list(index: str | None, as_json: bool) -> None:
    """Every user, its groups and where it came from (local, or oidc: a sign-in)."""
    with closing(open_key_store(load_settings(index))) as keys:
        users = keys.users()
    if as_json:
        emit_json([{"name": u.name, "groups": list(u.groups), "origin": u.origin, "updated_at": u.updated_at}
                   for u in users])
        return
    for u in users:
        click.echo(f"{u.name:<24} {u.origin:<6} {' '.join(u.groups) or '-'}")


@users_group.command("remove")
@click.argument("name")
@index_option
def users_remove(name: str, index: str | None) -> None:
    """Remove the user with its keys and sessions, in one transaction."""
    settings = load_settings(index)
    with closing(open_key_store(settings)) as keys:
        if not keys.remove_user(name):
            raise CiteragError(f"no user {name!r}")
    audited(settings, "user.remove", user=name)
    click.echo(f"removed {name} and its keys")


@click.command("restrict")
@click.argument("document")
@click.argument("groups", nargs=-1)
@index_option
@json_option()
def restrict(document: str, groups: tuple[str, ...], index: str | None, as_json: bool) -> None:
    """Let only these groups read a document (none: everyone who may read the collection again); DOCUMENT is its id
    or its path. Takes effect for the next request, on every route."""
    settings = load_settings(index)
    with Citerag.open(settings) as app:
        doc = app.restrict(document, checked_groups(groups, "GROUPS"))
        collection = app.collection().name
    audited(settings, "document.groups", collection, (doc.id,), groups=doc.groups)
    if as_json:
        emit_json({"id": doc.id, "source_path": doc.source_path, "groups": doc.groups})
    else:
        click.echo(f"{doc.source_path}: {' '.join(doc.groups) if doc.groups else 'everyone'}")
