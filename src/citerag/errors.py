"""Errors a user sees as one line, never as a traceback."""


class CiteragError(Exception):
    """A problem the user can act on; the CLI prints it as one line and exits non-zero."""


class ExtractionError(CiteragError):
    """A document could not be turned into text; stored as the document's failure reason."""
