"""Tests that need a system binary: skipped with the reason on a machine without it (a user's fresh clone), failed
instead where CI promised it (CITERAG_REQUIRE_OCR=1), so a skip never hides an untested path."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import pytest

from citerag.extract.ocr import TESSERACT_MISSING, tesseract_available


def needs_tesseract(test: Callable[..., None]) -> Callable[..., None]:
    """A test that OCRs: skipped, with the reason, where the tesseract binary is missing; under
    CITERAG_REQUIRE_OCR=1 (CI, which installs tesseract-ocr) it fails instead, so a skip never hides untested OCR."""
    if tesseract_available():
        return test
    if os.environ.get("CITERAG_REQUIRE_OCR", "") in ("", "0"):
        return pytest.mark.skip(reason=TESSERACT_MISSING)(test)

    @functools.wraps(test)
    def fail(*args: Any, **kwargs: Any) -> None:
        pytest.fail(f"{TESSERACT_MISSING} (and CITERAG_REQUIRE_OCR is set)", pytrace=False)

    return fail
