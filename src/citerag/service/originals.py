"""The uploaded originals live in the application core (citerag.originals): the CLI's retry and reindex read them
too. Kept under this name for the service's routes and queues."""

from citerag.originals import UPLOAD_SCHEME, Originals, forget_original, originals, read_original, save_original

__all__ = ["UPLOAD_SCHEME", "Originals", "forget_original", "originals", "read_original", "save_original"]
