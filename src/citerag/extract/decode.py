"""Bytes to text for the text-based formats: UTF-8 first, a recorded fallback, binary refused."""

from __future__ import annotations

from citerag.errors import ExtractionError

# Control characters that never occur in real text files; tab, LF, FF and CR do.
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13))


def decode_text(data: bytes) -> tuple[str, list[str]]:
    """Return (text with newlines normalised to \\n, warnings)."""
    if not data.strip():
        raise ExtractionError("empty file: no text to index")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ExtractionError(f"binary data, not text (NUL byte at offset {nul})")
    sample = data[:65536]
    if sum(sample.count(bytes([c])) for c in _CONTROL) > len(sample) // 100:
        raise ExtractionError("binary data, not text (too many control characters)")
    warnings: list[str] = []
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # Real files saved by older editors are often Windows-1252; keep them, and say so.
        text = data.decode("cp1252", errors="replace")
        warnings.append(f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                        "decoded as Windows-1252")
    return text.replace("\r\n", "\n").replace("\r", "\n"), warnings
