"""API keys for the service: the key store (citerag.keystore) under the name the service has always used.

The store itself lives outside citerag.service: its PostgreSQL backend applies the schema migrations, which the
service's modules may not import (tests/test_layering.py). `open_key_store(settings)` picks the backend from the
home's store URL.
"""

from __future__ import annotations

from citerag.keystore import LOCAL, PREFIX, SCOPES, KeyInfo, KeyStore, Principal, open_key_store

__all__ = ["LOCAL", "PREFIX", "SCOPES", "KeyInfo", "KeyStore", "Principal", "open_key_store"]
