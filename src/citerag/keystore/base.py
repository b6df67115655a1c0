"""What every API key store shares: the token format (`crk_<prefix>_<secret>`), the hash, the scope rules and the
constant-time check, the browser sessions' tokens (`crs_<secret>`), and the KeyStore protocol. The backends
(citerag.keystore.sqlite, citerag.keystore.postgres) import this module, never the package, so that the package's
wrapper can name them without a circle.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from citerag.errors import CiteragError
from citerag.types import GROUP

SCOPES = ("read", "write", "admin")
PREFIX = "crk_"
SESSION_PREFIX = "crs_"


@dataclass(frozen=True)
class Principal:
    """Who is asking: a key's prefix (or `user:NAME` for a signed-in user), its collection (None = every
    collection), its scope, and, for reading documents, its user and groups (see `audience`)."""

    key: str
    collection: str | None
    scope: str
    user: str | None = None
    groups: frozenset[str] = frozenset()

    def sees(self, collection: str) -> bool:
        return self.collection is None or self.collection == collection

    def may(self, collection: str, scope: str) -> bool:
        return self.sees(collection) and SCOPES.index(self.scope) >= SCOPES.index(scope)

    @property
    def server_admin(self) -> bool:
        return self.collection is None and self.scope == "admin"

    @property
    def audience(self) -> frozenset[str] | None:
        """The groups whose documents it may read, besides those open to everyone; None: every document. An admin
        of the collection sees every document (it sets who may read them); a key of no user and no groups sees the
        open ones only."""
        return None if self.scope == "admin" else self.groups

    @property
    def who(self) -> str:
        """How the audit trail and the traces name it: `user:NAME`, `key:PREFIX` or `local`."""
        if self.user is not None:
            return f"user:{self.user}"
        return self.key if self.key == "local" or self.key.startswith("user:") else f"key:{self.key}"


# Local use without keys (loopback only): one user who may do everything.
LOCAL = Principal("local", None, "admin")


@dataclass(frozen=True)
class KeyInfo:
    prefix: str
    collection: str | None
    scope: str
    created_at: str
    user: str | None = None
    groups: tuple[str, ...] = ()  # a service key's own groups (a user's key reads with its user's)


@dataclass(frozen=True)
class UserInfo:
    """A user: made by `citerag users`, or at an OpenID Connect sign-in (origin `oidc`, groups from its claim)."""

    name: str
    groups: tuple[str, ...]
    origin: str
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class NewKey:
    """A key about to be stored: the token (shown once, never stored) and the row a backend stores."""

    token: str
    prefix: str
    digest: str
    collection: str | None
    scope: str
    created_at: str
    user: str | None = None
    groups: str = "[]"  # JSON, as stored


class KeyStore(Protocol):
    """Where API keys live. Every backend: only the hash stored, `verify` in constant time."""

    def create(self, collection: str | None, scope: str, user: str | None = None,
               groups: Sequence[str] = ()) -> str:
        """A new key, returned once: only its hash is kept. It belongs to `user` (which must exist, and reads with
        the user's groups as they are at each request), or is a service key reading with `groups`."""
        ...

    def put_user(self, name: str, groups: Sequence[str], origin: str = "local") -> UserInfo:
        """Create the user or replace its groups (an OpenID Connect sign-in does, from the provider's claim); its
        keys and sessions read with the new groups from the next request on."""
        ...

    def users(self) -> list[UserInfo]:
        """Every user, by name."""
        ...

    def remove_user(self, name: str) -> bool:
        """Remove a user, its keys and its sessions; False when there is none."""
        ...

    def start_user_session(self, user: str, ttl_s: float) -> str | None:
        """A browser session for a signed-in user (OpenID Connect), returned once, reading every collection with the
        user's groups; it ends as a key's session does, and with the user's removal. None: no such user."""
        ...

    def list(self) -> list[KeyInfo]:
        """Every key (never the key itself), oldest first."""
        ...

    def revoke(self, prefix: str) -> bool:
        """Revoke one key; False when no key has this prefix."""
        ...

    def revoke_collection(self, collection: str) -> int:
        """Revoke every key of a deleted collection: a collection created later under its name starts with none."""
        ...

    def verify(self, token: str) -> Principal | None:
        """The key's principal, or None for anything that is not a live key."""
        ...

    def start_session(self, key: str, ttl_s: float) -> str | None:
        """A new browser session for the live key `key`, returned once (only its hash is kept), ending after
        `ttl_s` seconds, or when it is ended or the key revoked; None when `key` is not a live key."""
        ...

    def verify_session(self, token: str) -> Principal | None:
        """The principal of the session's key, or None for anything that is not a live session of a live key."""
        ...

    def end_session(self, token: str) -> bool:
        """End one session (logout); False when there was none."""
        ...

    def close(self) -> None:
        """Release connections (a no-op where there are none)."""
        ...


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_key(collection: str | None, scope: str, user: str | None = None, groups: Sequence[str] = ()) -> NewKey:
    """Check the scope rules and make a random key; the caller stores everything but `token`."""
    if scope not in SCOPES:
        raise CiteragError(f"scope {scope!r}: expected one of {', '.join(SCOPES)}")
    if collection is None and scope != "admin":
        raise CiteragError("a key without --collection is a server admin key: use --scope admin")
    if user is not None and groups:
        raise CiteragError("a key belongs to a user (and reads with the user's groups) or has its own groups: "
                           "not both")
    prefix = secrets.token_hex(4)
    token = f"{PREFIX}{prefix}_{secrets.token_urlsafe(24)}"
    return NewKey(token, prefix, digest(token), collection, scope, datetime.now(UTC).isoformat(timespec="seconds"),
                  user, json.dumps(checked_groups(groups)))


MAX_GROUPS = 64


def checked_groups(groups: Iterable[str], field: str = "groups") -> list[str]:
    """Groups as given, checked, without repeats, in their order (a CiteragError names the field)."""
    out: list[str] = []
    for group in groups:
        if not isinstance(group, str) or not GROUP.match(group):
            raise CiteragError(f"{field}: {str(group)[:40]!r} is not a group name (a letter or digit, then letters, "
                               "digits and _ . : @ / -, at most 128)")
        if group not in out:
            out.append(group)
    if len(out) > MAX_GROUPS:
        raise CiteragError(f"{field}: at most {MAX_GROUPS} groups")
    return out


# A key's collection, scope, user and groups, as both backends select them (keys as `k`, users as `u`): a user's key
# reads with its user's groups as they are now.
PRINCIPAL_COLUMNS = ("k.collection, k.scope, k.user_name,"
                     " CASE WHEN k.user_name IS NULL THEN k.member_of ELSE u.member_of END")


def principal_of(prefix: str, collection: str | None, scope: str, user: str | None,
                 groups: str | list[str] | None) -> Principal:
    """A stored key's principal; `groups` as stored (JSON text in SQLite, a list from PostgreSQL's JSONB)."""
    found = json.loads(groups) if isinstance(groups, str) else (groups or [])
    return Principal(prefix, collection, scope, user, frozenset(found))


def token_prefix(token: str) -> str:
    """The prefix a token names ('' for anything not shaped like a key): what a backend looks its row up by."""
    return token[len(PREFIX):].partition("_")[0] if token.startswith(PREFIX) else ""


_NO_KEY = digest("no such key")


def check(token: str, row: tuple[Any, ...] | None) -> Principal | None:
    """The principal of `row` (digest, collection, scope, user, groups, as stored under the token's prefix) if
    `token` is its key. Compared in constant time, and compared even when no row matched, so timing tells
    nothing."""
    stored = row[0] if row is not None else _NO_KEY
    if hmac.compare_digest(stored, digest(token)) and row is not None:
        return principal_of(token_prefix(token), *row[1:5])
    return None


@dataclass(frozen=True)
class NewSession:
    """A session about to be stored: the token (the cookie's value, never stored) and the row a backend stores.
    `key_digest` binds it to one key, not to a prefix a later key could reuse."""

    token: str
    digest: str
    prefix: str
    key_digest: str
    created_at: str
    expires_at: float  # seconds since the epoch


def new_session(key: str, ttl_s: float) -> NewSession:
    """A random session token for `key` (already verified by the caller); the caller stores everything but `token`.
    256 random bits: a session is looked up by its hash, which tells a guesser nothing (see `session_digest`)."""
    token = f"{SESSION_PREFIX}{secrets.token_urlsafe(32)}"
    now = time.time()
    return NewSession(token, digest(token), token_prefix(key), digest(key),
                      datetime.now(UTC).isoformat(timespec="seconds"), now + ttl_s)


def session_digest(token: str) -> str | None:
    """What a session is stored and looked up under (None for anything not shaped like a session token). Looking a
    random token up by its SHA-256 in an index leaks no more than a constant-time compare: the timing depends on
    the hash, which the guesser cannot steer towards a stored one."""
    return digest(token) if token.startswith(SESSION_PREFIX) and len(token) > len(SESSION_PREFIX) else None
