"""File plumbing shared by the persisted indexes: new names for new files, durable writes."""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np


def new_name(prefix: str, suffix: str = "") -> str:
    """A file name no earlier state used: files are written once and replaced, never rewritten under readers."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}{suffix}"


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_error(path: Path, exc: Exception) -> OSError:
    """A failed write a library reported without an errno (numpy's "N requested and M written", usearch's "Failed
    to serialize into stream") as the OSError it was, so that the user reads the cause: ENOSPC when the file
    system has under 64 KiB left (a short write there is a full disk), EIO otherwise."""
    try:
        st = os.statvfs(path.parent)
        full = st.f_bavail * st.f_frsize < 65536
    except OSError:
        full = False
    code = errno.ENOSPC if full else errno.EIO
    return OSError(code, f"{os.strerror(code)} ({exc})", str(path))


@contextmanager
def named_errors(path: Path) -> Iterator[None]:
    """Writes to `path` whose failure always carries an errno (see write_error)."""
    try:
        yield
    except OSError as exc:
        if exc.errno is not None:
            raise
        raise write_error(path, exc) from exc


def save_arrays(path: Path, **arrays: np.ndarray) -> None:
    """One .npz, durable before the manifest that names it is written."""
    with named_errors(path), open(path, "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
        f.flush()
        os.fsync(f.fileno())


def load_arrays(path: Path) -> dict[str, Any]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def save_array(path: Path, array: np.ndarray) -> None:
    with named_errors(path), open(path, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())
