"""The audit trail (issue 30): who asked what, which documents were returned or opened, permission, key, user and
session changes, each with its principal, time and trace id; swept after `audit_retention_days` (0: none kept).
Read back with `citerag audit` and the admin routes GET /v1/audit and GET /v1/collections/{name}/audit.

One trail per home, like the API keys, in the backend the home's store URL picks (citerag.backends): HOME/audit.sqlite3
(citerag.audit.sqlite) or the database's `audit_events` table (citerag.audit.postgres). What both share, the event,
the protocol, the query's checks and a `record` that never raises, is in citerag.audit.base, which the backends
import (never this package). The callers record; a question's text is in an event only where they put it there,
which they do only for a collection that keeps trace text. See docs/audit.md.
"""

from __future__ import annotations

from citerag.audit.base import ACTIONS, FAMILIES, AuditEvent, AuditLog, AuditQuery, AuditQueryError, NoAudit, event

__all__ = ["ACTIONS", "FAMILIES", "AuditEvent", "AuditLog", "AuditQuery", "AuditQueryError", "NoAudit", "event"]
