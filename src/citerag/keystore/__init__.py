"""API keys: `crk_<prefix>_<secret>`, random, shown once, stored only as a SHA-256 hash, compared in constant time.

A key is scoped to one collection (read < write < admin), or, created without a collection, is a server admin key
(creates collections, sees all). SHA-256 rather than a slow password hash: the secret is 192 random bits, so
there is nothing to brute-force, and every request checks a key.

Where keys live follows the home's store (citerag.backends picks the backend): a sqlite:/// home keeps them in
HOME/keys.sqlite3 (citerag.keystore.sqlite); a postgresql:// home in the database's `api_keys` table
(citerag.keystore.postgres), so a key created on one machine opens every API process on every machine. Both
backends share everything but the SQL: the token format, the hash, the scope rules and the constant-time check
are in citerag.keystore.base.

This package sits outside citerag.service because the PostgreSQL backend applies the schema migrations
(citerag.store.pg_migrate), which the service's modules may not import (tests/test_layering.py);
citerag.service.keys re-exports it for the service.
"""

from __future__ import annotations

from citerag.keystore.base import (
    LOCAL,
    PREFIX,
    SCOPES,
    SESSION_PREFIX,
    KeyInfo,
    KeyStore,
    NewKey,
    NewSession,
    Principal,
    check,
    digest,
    new_key,
    new_session,
    session_digest,
    token_prefix,
)

__all__ = ["LOCAL", "PREFIX", "SCOPES", "SESSION_PREFIX", "KeyInfo", "KeyStore", "NewKey", "NewSession", "Principal",
           "check", "digest", "new_key", "new_session", "session_digest", "token_prefix"]
