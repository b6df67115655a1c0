"""Errors a user sees as one line, never as a traceback."""


class CiteragError(Exception):
    """A problem the user can act on; the CLI prints it as one line and exits non-zero."""


class ExtractionError(CiteragError):
    """A document could not be turned into text; stored as the document's failure reason."""


class StoreUnavailable(CiteragError):
    """The store cannot be written or read: disk full, I/O error, read-only, locked.

    An environment problem, not a document's: the run stops (no document is marked failed for it) and
    `citerag retry` recovers once the cause is fixed.
    """

    def __init__(self, message: str, cause: str | None = None) -> None:
        super().__init__(message)
        # What an API can tell a client without reading the message: FULL (no space left, or a quota), READ_ONLY,
        # or None (I/O, locked, unreachable).
        self.cause = cause


FULL, READ_ONLY = "full", "read-only"


class Superseded(CiteragError):
    """A rebuild of a document's version found a newer version committed meanwhile: nothing to do."""


def first_line(exc: BaseException) -> str:
    """An exception as one line of a message (a driver's error text often runs to several)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
