"""OCR with the Tesseract binary (Debian package tesseract-ocr): an image in, paragraphs and a confidence out.

The binary is called directly (no Python wrapper needed) with TSV output, which gives each word its
block, paragraph and line and a confidence 0-100; the page confidence is the mean over words.
Page segmentation mode 1 detects orientation, so rotated scans are read upright.

Tesseract is a Debian package, not a Python dependency: without it, image-only PDF pages are not read
and say so (`TESSERACT_MISSING`). An engine whose models ship in its wheel (RapidOCR) was measured
against it on the scanned sample and lost (three times the character and word error rates, 2.6 times
slower per page): benchmarks/ocr_engines.py.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from citerag.errors import ExtractionError

OCR_TIMEOUT_S = 180
TESSERACT_MISSING = "tesseract not installed: apt-get install tesseract-ocr"


@dataclass
class OcrPage:
    paragraphs: list[str]
    confidence: float  # mean word confidence, 0-100


@lru_cache(maxsize=1)
def tesseract_available() -> bool:
    return shutil.which("tesseract") is not None


def _run(png: bytes, psm: int) -> str:
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        proc = subprocess.run(["tesseract", "stdin", "stdout", "--psm", str(psm), "-l", "eng", "tsv"],
                              input=png, capture_output=True, timeout=OCR_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise ExtractionError(f"OCR took over {OCR_TIMEOUT_S} s: skipped") from None
    except OSError as exc:
        raise ExtractionError(f"cannot run tesseract: {exc.strerror}") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ExtractionError(f"tesseract failed: {err[-1] if err else proc.returncode}")
    return proc.stdout.decode("utf-8", "replace")


def parse_tsv(tsv: str) -> OcrPage:
    paras: dict[tuple[int, int, int], dict[tuple[int, ...], list[str]]] = {}
    confs: list[float] = []
    for row in tsv.splitlines()[1:]:
        cols = row.split("\t")
        if len(cols) < 12 or cols[0] != "5":
            continue
        word = cols[11].strip()
        try:
            conf = float(cols[10])
        except ValueError:
            continue
        if not word or conf < 0:
            continue
        page, block, par, line = (int(c) for c in cols[1:5])
        paras.setdefault((page, block, par), {}).setdefault((line,), []).append(word)
        confs.append(conf)
    paragraphs = []
    for lines in paras.values():
        text = "\n".join(" ".join(words) for words in lines.values())
        if text.strip():
            paragraphs.append(text)
    return OcrPage(paragraphs, sum(confs) / len(confs) if confs else 0.0)


def ocr_image(image: Any) -> OcrPage:
    """OCR a PIL image; psm 1 (automatic, with orientation detection), psm 3 if that finds nothing."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    png = buf.getvalue()
    page = parse_tsv(_run(png, 1))
    if not page.paragraphs:
        page = parse_tsv(_run(png, 3))
    return page
