"""`citerag serve` and `citerag keys`: the HTTP service and its API keys, over the index folder (--index)."""

from __future__ import annotations

import os
from contextlib import closing
from typing import TYPE_CHECKING, Any

import click

from citerag.app.home import check_collection_name, open_catalog
from citerag.cli.options import index_option
from citerag.cli.users import audited
from citerag.errors import CiteragError
from citerag.settings import Settings, load_settings

if TYPE_CHECKING:
    from citerag.keystore.base import KeyInfo, KeyStore


@click.command("serve")
@index_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--no-keys", is_flag=True, help="Serve without API keys (loopback addresses only).")
@click.option("--max-upload-mb", type=click.FloatRange(0.001, 100_000), default=100.0, show_default=True,
              help="Largest request body.")
@click.option("--metrics-token-env", metavar="NAME", default=None,
              help="Environment variable holding a token that GET /metrics then requires (Bearer); "
                   "without it /metrics is open (it carries no document text).")
@click.option("--rate-limit", default="600/minute", show_default=True, metavar="N/PERIOD",
              help="Requests per API key (per client address without a valid key) per second, minute, hour or "
                   "day; over it a 429 with Retry-After. `none` turns it off.")
@click.option("--rate-limit-storage", default="memory://", show_default=True, metavar="URL",
              help="Where the counts live: memory:// (this process) or redis://HOST:PORT/DB (shared by every "
                   "API process).")
@click.option("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
              help="Proxies (comma-separated addresses or networks, or *) whose X-Forwarded-For and "
                   "X-Forwarded-Proto are believed: the client address the rate limit counts and the scheme. "
                   "Default: none, whatever FORWARDED_ALLOW_IPS says.")
@click.option("--client-timeout", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              metavar="SECONDS", help="A request's head must arrive whole within it and its body may not pause "
                                      "longer; slower clients are cut off.")
@click.option("--oidc-issuer", metavar="URL", default=None,
              help="Sign-in through this OpenID Connect provider (the page, and Bearer ID tokens for the API); "
                   "signed-in users read the documents open to everyone and those of their groups.")
@click.option("--oidc-client-id", metavar="ID", default=None, help="This server's client id at the provider.")
@click.option("--oidc-client-secret-env", metavar="NAME", default=None,
              help="Environment variable holding the client's secret (none: a public client, PKCE alone).")
@click.option("--oidc-groups-claim", metavar="CLAIM", default="groups", show_default=True,
              help="The ID token's claim that lists the user's groups.")
@click.option("--oidc-admin-group", metavar="GROUP", default=None,
              help="Members of this group administer every collection.")
def serve_command(index: str | None, host: str, port: int, no_keys: bool, max_upload_mb: float,
                  metrics_token_env: str | None, rate_limit: str, rate_limit_storage: str,
                  client_timeout: float, forwarded_allow_ips: str | None, oidc_issuer: str | None,
                  oidc_client_id: str | None, oidc_client_secret_env: str | None, oidc_groups_claim: str,
                  oidc_admin_group: str | None) -> None:
    """Serve the API (/v1, OpenAPI at /docs), the web page (/) and Prometheus metrics (/metrics) with uvicorn."""
    from citerag.service import server
    from citerag.service.app import create_app
    from citerag.service.state import ServiceConfig

    metrics_token = None
    if metrics_token_env is not None:
        metrics_token = os.environ.get(metrics_token_env, "").strip()
        if not metrics_token:
            raise CiteragError(f"--metrics-token-env {metrics_token_env}: that environment variable is not set "
                               "or empty")
    config = ServiceConfig(host=host, port=port, keys_required=not no_keys, max_upload_mb=max_upload_mb,
                           metrics_token=metrics_token, rate_limit=rate_limit,
                           rate_limit_storage=rate_limit_storage, client_timeout_s=client_timeout,
                           forwarded_allow_ips=forwarded_allow_ips,
                           oidc=_oidc(oidc_issuer, oidc_client_id, oidc_client_secret_env, oidc_groups_claim),
                           oidc_admin_group=oidc_admin_group)
    config.check()  # before anything loads: binding beyond loopback without keys is refused
    settings = load_settings(index)
    app = create_app(settings, config)
    click.echo(f"citerag serving {_home(settings)} on http://{host}:{port}/"
               + ("  (no keys: loopback only)" if no_keys else ""), err=True)
    if not no_keys and not _keys(settings):
        click.echo("no API keys yet: create one with `citerag keys create --scope admin`", err=True)
    server.run(app, host, port, client_timeout, config.forwarded_allow_ips)


def _oidc(issuer: str | None, client_id: str | None, secret_env: str | None, claim: str) -> Any:
    """The provider's settings from `serve`'s options (None without --oidc-issuer)."""
    from citerag.service.oidc import OidcConfig

    if issuer is None:
        if client_id or secret_env:
            raise CiteragError("--oidc-client-id and --oidc-client-secret-env need --oidc-issuer URL")
        return None
    if not client_id:
        raise CiteragError("--oidc-issuer needs --oidc-client-id ID (this server's client at the provider)")
    secret = None
    if secret_env is not None:
        secret = os.environ.get(secret_env, "").strip()
        if not secret:
            raise CiteragError(f"--oidc-client-secret-env {secret_env}: that environment variable is not set or empty")
    return OidcConfig(issuer, client_id, secret, claim)


@click.group("keys")
def keys_group() -> None:
    """API keys: created here, shown once, stored as a hash."""


@keys_group.command("create")
@index_option
@click.option("--collection", default=None, help="The collection the key is for; omit for a server admin key.")
@click.option("--scope", type=click.Choice(["read", "write", "admin"]), required=True)
@click.option("--user", default=None, help="The user the key belongs to: it reads with the user's groups.")
@click.option("--group", "groups", multiple=True, help="A service key's group (repeat the option).")
def keys_create(index: str | None, collection: str | None, scope: str, user: str | None,
                groups: tuple[str, ...]) -> None:
    """Print a new key (once): read = search and ask; write = also upload, replace, delete; admin = all, every
    document included. Below admin, a key reads the documents open to everyone and those of its user's groups
    (--user) or its own (--group)."""
    settings = load_settings(index)
    if collection is not None:
        check_collection_name(collection)  # one line naming the rule, before the name reaches the catalog
        with closing(open_catalog(settings)) as catalog:
            if not catalog.exists(collection):
                raise CiteragError(f"no collection {collection!r} in {_home(settings)} "
                                   f"(collections: {', '.join(catalog.names())})")
    with _key_store(settings) as keys:
        token = keys.create(collection, scope, user, groups)
    audited(settings, "key.create", collection, key=token.split("_")[1], scope=scope, user=user, groups=list(groups))
    click.echo(token)
    click.echo(f"{scope} key for {'every collection' if collection is None else f'collection {collection!r}'}; "
               "it is not shown again", err=True)


@keys_group.command("list")
@index_option
def keys_list(index: str | None) -> None:
    """Prefix, collection, scope and creation time of every key (never the key)."""
    for key in _keys(load_settings(index)):
        whose = f"user:{key.user}" if key.user else ",".join(key.groups) or "-"
        click.echo(f"crk_{key.prefix}  {key.collection or '*':<20} {key.scope:<6} {key.created_at}  {whose}")


@keys_group.command("revoke")
@click.argument("prefix")
@index_option
def keys_revoke(prefix: str, index: str | None) -> None:
    """Revoke the key with this prefix (as `keys list` shows it, with or without crk_)."""
    settings = load_settings(index)
    with _key_store(settings) as keys:
        revoked = keys.revoke(prefix.removeprefix("crk_"))
    if not revoked:
        raise CiteragError(f"no key with prefix {prefix}")
    audited(settings, "key.revoke", key=prefix.removeprefix("crk_"))
    click.echo(f"revoked {prefix}")


def _keys(settings: Settings) -> list[KeyInfo]:
    """The home's keys: HOME/keys.sqlite3, or the database's for a postgresql:// home (the same on every machine)."""
    with _key_store(settings) as keys:
        return keys.list()


def _key_store(settings: Settings) -> closing[KeyStore]:
    """The home's key store, closed on leaving the `with`: the home's database for a postgresql:// home."""

    from citerag.app.home import open_key_store

    return closing(open_key_store(settings))


def _home(settings: Settings) -> str:
    """The home as a person reads it: its folder, or its database's URL without the password."""
    return str(settings.index_dir) if settings.store_scheme == "sqlite" else settings.safe_url
