"""Files chosen to escape: archive members named `../../..` or `/etc/...` or stored as symbolic links, and folders
with symbolic links out of them (upload names that are paths: tests/service/test_hostile_uploads.py). Nothing is
written or read outside where citerag keeps its own files; the documents still index by their real content."""

from __future__ import annotations

import io
import logging
import os
import zipfile
from pathlib import Path

import pytest

from citerag.app.home import Citerag
from citerag.app.models import SearchOptions
from citerag.settings import Settings
from corpus_paths import DATA

DOCX = DATA / "samples" / "docx-python-docx-paras-tables.docx"
ESCAPES = ["../../../../{tmp}/pwned.txt", "/{tmp}/pwned-absolute.txt", "..\\..\\{tmp}\\pwned-backslash.txt",
           "word/../../../{tmp}/pwned-nested.txt"]


def _everything(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _hostile_docx(tmp: Path) -> bytes:
    """The real sample DOCX plus members whose names climb out, and one stored as a symlink to /etc/passwd."""
    out = io.BytesIO()
    rel = str(tmp).lstrip("/")
    with zipfile.ZipFile(DOCX) as original, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as hostile:
        for info in original.infolist():
            hostile.writestr(info, original.read(info))
        for name in ESCAPES:
            hostile.writestr(name.format(tmp=rel), b"written outside the index")
        link = zipfile.ZipInfo("word/media/passwd")
        link.external_attr = 0o120777 << 16  # a Unix symlink member
        hostile.writestr(link, "/etc/passwd")
    return out.getvalue()


def test_archive_members_that_climb_out_or_link_out_are_never_written_or_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"  # where the climbing members point
    target.mkdir()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hostile.docx").write_bytes(_hostile_docx(target))
    before = _everything(tmp_path)
    with Citerag.open(Settings(index_dir=tmp_path / "ix"), create=True) as app:
        report = app.ingest([docs])
        assert not report.failed and len(report.indexed) == 1  # the document's own parts still index
        text = app.collection().store.canonical_text(app.status().documents[0].document.id)
    assert not list(target.iterdir()) and not any("pwned" in p for p in _everything(tmp_path))
    assert "root:" not in text and "written outside" not in text
    assert _everything(tmp_path) - before <= {p for p in _everything(tmp_path) if p.startswith("ix")}


def test_a_folders_symbolic_links_out_of_it_are_skipped_and_said(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    (docs / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.md").write_text("# Payroll\n\nThe zorblax payroll password is hunter2.\n")
    (docs / "real.md").write_text("# Locales\n\nRegenerate the zorblax locale with locale-gen after upgrades.\n")
    os.symlink(outside / "secret.md", docs / "leak.md")
    os.symlink(outside, docs / "sub" / "linked-folder")
    os.symlink(docs / "real.md", docs / "alias.md")  # a link inside the folder: the file it names, once
    with caplog.at_level(logging.WARNING, logger="citerag.ingest"), \
            Citerag.open(Settings(index_dir=tmp_path / "ix"), create=True) as app:
        report = app.ingest([docs])
        assert report.indexed == [str(docs / "real.md")]
        hits = app.search("zorblax payroll password", SearchOptions(mode="bm25", k=5)).citations
    assert all("hunter2" not in c.quote for c in hits) and all(c.source_path.endswith("real.md") for c in hits)
    assert [r.getMessage() for r in caplog.records] == [
        f"skipped {docs / 'leak.md'}: a symbolic link out of {docs} (name the file itself to index it)"]
