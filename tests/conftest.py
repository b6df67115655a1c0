from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from corpus_paths import DATA, DEV_CORPUS


@pytest.fixture(scope="session")
def encoder():  # type: ignore[no-untyped-def]
    from citerag.embed import load_encoder

    return load_encoder("all-MiniLM-L6-v2")


@pytest.fixture()
def small_corpus(tmp_path: Path) -> Path:
    """Three real chapters of the dev set (HTML) and one real Markdown file, in a fresh folder."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("ch08.en.html", "apa.en.html", "pr01.en.html"):
        shutil.copy(DEV_CORPUS / name, folder / name)
    shutil.copy(DATA / "markdown" / "debian-reference" / "ch04.md", folder / "ch04.md")
    return folder
