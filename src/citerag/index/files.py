"""File plumbing shared by the persisted indexes: new names for new files, durable writes."""

from __future__ import annotations

import os
import uuid
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


def save_arrays(path: Path, **arrays: np.ndarray) -> None:
    """One .npz, durable before the manifest that names it is written."""
    with open(path, "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
        f.flush()
        os.fsync(f.fileno())


def load_arrays(path: Path) -> dict[str, Any]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def save_array(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())
