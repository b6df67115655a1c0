"""One cache file of named parts (byte strings and numpy arrays) plus a JSON header, opened as a memory map.

Arrays come back as read-only views of the mapped file, so a big table costs nothing to open and is paged in as it
is touched (and shared by every process on the machine); byte parts come back as bytes. The file is written to a
temporary file and renamed into place, so readers racing a writer see a whole file or none. Opening checks what is
cheap to check: the magic, the header's CRC-32, the key the caller expects (a file for other inputs is refused),
the file's size, and the CRC-32 of every part up to CHECK_LIMIT bytes (a bigger part would have to be read whole,
which is what the map saves). Anything else is a CacheError: the caller rebuilds.

Layout: 16-byte magic, header length and header CRC (little-endian uint32), the header, then each part at an
offset aligned to 64 bytes (arrays are aligned for BLAS).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"citerag-mapped\x00\x01"
_PREFIX = struct.Struct("<16sII")  # magic, header length, header CRC-32
_ALIGN = 64
# Parts at most this big are CRC-checked on open.
CHECK_LIMIT = 16 << 20


class CacheError(Exception):
    """The cache file is missing, damaged or written for another key: rebuild it."""


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def write(path: Path, key: str, meta: dict[str, Any], parts: dict[str, bytes | np.ndarray]) -> None:
    """Write `parts` under `key` with `meta` (anything JSON holds) to `path`, atomically."""
    blobs: list[bytes] = []
    entries: list[dict[str, Any]] = []
    offset = 0
    for name, value in parts.items():
        entry: dict[str, Any]
        if isinstance(value, np.ndarray):
            blob = np.ascontiguousarray(value).tobytes()
            entry = {"kind": "array", "dtype": value.dtype.str, "shape": list(value.shape)}
        else:
            blob = bytes(value)
            entry = {"kind": "bytes"}
        entries.append({**entry, "name": name, "offset": offset, "nbytes": len(blob), "crc": zlib.crc32(blob)})
        blobs.append(blob)
        offset += _aligned(len(blob))
    head = json.dumps({"key": key, "meta": meta, "entries": entries, "data_bytes": offset}, sort_keys=True).encode()
    start = _aligned(_PREFIX.size + len(head))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_PREFIX.pack(MAGIC, len(head), zlib.crc32(head)))
            f.write(head)
            for written, blob in zip(entries, blobs, strict=True):
                f.seek(start + int(written["offset"]))
                f.write(blob)
            f.truncate(start + offset)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(path: Path, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(meta, parts by name) of the file at `path` written under `key`: bytes for byte parts, read-only arrays over
    the mapped file for arrays. CacheError when the file is missing, damaged or written under another key."""
    try:
        with path.open("rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        raise CacheError(f"cannot map {path}: {exc}") from None
    try:
        header, start = _checked_header(mapped, key)
    except (KeyError, TypeError, ValueError) as exc:  # a header that parses but does not describe this file
        mapped.close()
        raise CacheError(f"unreadable header: {exc}") from None
    except CacheError:
        mapped.close()
        raise
    parts: dict[str, Any] = {}
    for entry in header["entries"]:
        begin, size = start + entry["offset"], entry["nbytes"]
        if entry["kind"] == "array":
            dtype = np.dtype(entry["dtype"])
            parts[entry["name"]] = np.frombuffer(mapped, dtype=dtype, count=size // dtype.itemsize,
                                                 offset=begin).reshape(entry["shape"])
        else:
            parts[entry["name"]] = mapped[begin:begin + size]
    return header["meta"], parts


def _checked_header(mapped: mmap.mmap, key: str) -> tuple[dict[str, Any], int]:
    """The header, and where the data starts, once the file is seen to be whole."""
    if len(mapped) < _PREFIX.size:
        raise CacheError("shorter than its header")
    magic, head_len, head_crc = _PREFIX.unpack_from(mapped, 0)
    if magic != MAGIC:
        raise CacheError("not a citerag cache file")
    head = mapped[_PREFIX.size:_PREFIX.size + head_len]
    if len(head) != head_len or zlib.crc32(head) != head_crc:
        raise CacheError("damaged header")
    header = json.loads(head)
    if header["key"] != key:
        raise CacheError("written for other inputs")
    start = _aligned(_PREFIX.size + head_len)
    if len(mapped) != start + header["data_bytes"]:
        raise CacheError(f"{len(mapped)} bytes, {start + header['data_bytes']} expected")
    with memoryview(mapped) as whole:
        for entry in header["entries"]:
            begin, size = start + int(entry["offset"]), int(entry["nbytes"])
            if size < 0 or begin + size > len(mapped):
                raise CacheError(f"part {entry['name']} outside the file")
            if entry["kind"] == "array" and size % np.dtype(entry["dtype"]).itemsize:
                raise CacheError(f"part {entry['name']} is not whole {entry['dtype']} items")
            if size <= CHECK_LIMIT:
                with whole[begin:begin + size] as view:
                    if zlib.crc32(view) != entry["crc"]:
                        raise CacheError(f"damaged part {entry['name']}")
    return header, start
