"""A source's sync interrupted other than by SIGKILL (issue 29): a website whose server goes away half way through a
crawl, or is down when the sync starts, and a folder changed while a sync reads it. In each case every document
stays whole, nothing the origin still holds is removed, the source says what happened, and the next sync leaves
exactly the origin's documents. Real parts: an HTTP server on loopback (stopped and started again on its port), a
real folder. The text is XQuAD's (CC-BY-SA 4.0, eval/xquad-en)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from citerag.app import sources
from citerag.app.home import Citerag
from citerag.settings import Settings
from citerag.types import SourceInfo
from corpus_paths import ROOT
from upstreams import Site, page

PARAGRAPHS = [p for f in sorted((ROOT / "eval" / "xquad-en" / "corpus").glob("*.txt"))
              for p in f.read_text(encoding="utf-8").split("\n\n") if len(p) > 300][:12]


def _held(app: Citerag) -> dict[str, str]:
    """The source's indexed documents by key, and their SHA-256; every one whole."""
    collection = app.collection()
    snap = collection.store.snapshot(collection.settings.embedding_model)
    out = {}
    for doc in collection.documents():
        assert doc.status != "failed", doc
        if doc.status == "indexed":
            chunks = [c for c in snap.chunks if c.document_id == doc.id]
            assert chunks and all(snap.texts[doc.id][c.start:c.end] == c.content for c in chunks), doc.name
            out[doc.source_path.split(":", 2)[2]] = doc.sha256
    return out


def _site(root: Path) -> None:
    docs = root / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(PARAGRAPHS[:6]):
        (docs / f"p{i}.html").write_text(page(f"Page {i}", []).replace("</ul>", f"</ul><p>{text}</p>"))
    (docs / "index.html").write_text(page("Index", [f"p{i}.html" for i in range(6)]))


def _truth(site: Site) -> dict[str, str]:
    return {site.url(f"/docs/{p.name}"): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (site.root / "docs").glob("*.html")}


def test_a_website_that_goes_away_mid_crawl_or_is_down_removes_nothing(tmp_path: Path) -> None:
    _site(tmp_path / "site")
    site = Site(tmp_path / "site")
    port = site.port
    with Citerag.open(Settings(index_dir=tmp_path / "ix"), create=True) as app:
        sources.add(app.collection(), SourceInfo("wiki", "web", site.url("/docs/index.html"), {"rate": 100.0}))
        first = sources.sync(app.collection(), "wiki")
        assert first.complete and first.added == 7
        assert _held(app) == _truth(site)
        # Changed upstream, and the server goes away after answering three page requests of the next crawl.
        for i in (1, 4):
            path = site.root / "docs" / f"p{i}.html"
            path.write_text(path.read_text().replace("</p>", " A sentence added upstream.</p>"))
        answered: list[str] = []

        def going(path: str) -> None:
            answered.append(path)
            if len(answered) == 4:  # robots.txt, then three pages: the rest of the crawl finds no server
                threading.Thread(target=site.close).start()

        site.on_request = going
        cut = sources.sync(app.collection(), "wiki")
        assert not cut.complete and cut.removed == 0, cut
        held = _held(app)
        assert set(held) == set(_truth(site))  # nothing removed, every document whole (old or new version)
        shown = sources.view(sources.get(app.collection(), "wiki"))
        assert shown["complete"] is False and shown["last"]["failed"] >= 1
        # Down from the start: the sync's error, a backoff, nothing removed.
        down = sources.sync(app.collection(), "wiki")
        assert down.error and "127.0.0.1" in down.error and down.removed == 0
        assert set(_held(app)) == set(held)
        shown = sources.view(sources.get(app.collection(), "wiki"))
        assert shown["failures"] == 1 and shown["last_error"] == down.error and shown["next_run"]
        # Back on its port: the next sync completes, exactly the origin's documents at their newest bytes.
        site = Site(tmp_path / "site", port=port)
        try:
            done = sources.sync(app.collection(), "wiki")
            assert done.complete and done.error is None, done
            assert _held(app) == _truth(site)
            assert sources.view(sources.get(app.collection(), "wiki"))["failures"] == 0
        finally:
            site.close()


def test_a_folder_changed_while_a_sync_reads_it(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    for i, text in enumerate(PARAGRAPHS[:5]):
        (share / f"d{i}.txt").write_text(text)
    with Citerag.open(Settings(index_dir=tmp_path / "ix"), create=True) as app:
        collection = app.collection()
        sources.add(collection, SourceInfo("share", "folder", str(share)))
        index = collection.index_document
        calls: list[Any] = []

        def index_and_change(source: Any, **options: Any) -> Any:
            outcome = index(source, **options)
            calls.append(source.uri)
            if len(calls) == 2:  # mid-pass: one file already read is changed, one not yet read goes, one arrives
                (share / "d0.txt").write_text(PARAGRAPHS[0] + " Changed during the sync.")
                (share / "d4.txt").unlink()
                (share / "d9.txt").write_text(PARAGRAPHS[9])
            return outcome

        collection.index_document = index_and_change  # type: ignore[method-assign]
        report = sources.sync(collection, "share")
        collection.index_document = index  # type: ignore[method-assign]
        assert report.error is None and report.failed == 0, report
        held = _held(app)
        assert "d4.txt" not in held and held["d0.txt"] == hashlib.sha256(PARAGRAPHS[0].encode()).hexdigest()
        again = sources.sync(collection, "share")
        assert again.complete and again.error is None
        assert _held(app) == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in share.iterdir()}
        assert (again.changed, again.fetched) == (1, 1 + ("d9.txt" not in held)), again
