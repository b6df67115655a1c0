"""citerag.sources.web.WebSource against a real HTTP server on 127.0.0.1 serving a tiny site made of real pages
(two chapters of the Debian Reference and a real PDF), with ETag / Last-Modified validators, robots.txt, a
redirect, a canonical duplicate and sitemaps. The server logs every request, so the tests count what was fetched."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from citerag.sources.base import USER_AGENT, Change, Failed, Fetched, Known, Unchanged, Unreachable
from citerag.sources.web import WebSource
from corpus_paths import DATA, DEV_CORPUS
from upstreams import Site, page

BASE_LINKS = ["apa.en.html", "pr01.en.html#_preface", "table.pdf", "old.html", "private/secret.html",
              "../outside.html", "http://example.invalid/elsewhere.html", "mailto:someone@example.org"]
FAST = 1000.0  # requests per second: pacing is tested on its own


@pytest.fixture()
def site(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "site"
    (root / "docs" / "private").mkdir(parents=True)
    (root / "robots.txt").write_text("User-agent: *\nDisallow: /docs/private/\n")
    (root / "outside.html").write_text(page("Outside the prefix", []))
    (root / "docs" / "index.en.html").write_text(page("A tiny site", BASE_LINKS))
    (root / "docs" / "new.html").write_text(page("Where old.html went", ["index.en.html"]))
    (root / "docs" / "private" / "secret.html").write_text(page("Disallowed by robots.txt", []))
    for name in ("apa.en.html", "pr01.en.html"):
        shutil.copy(DEV_CORPUS / name, root / "docs" / name)
    shutil.copy(DATA / "samples" / "pdf-table-mtcars-3p.pdf", root / "docs" / "table.pdf")
    served = Site(root)
    yield served
    served.server.shutdown()
    served.server.server_close()


def scan(source: WebSource, known: Mapping[str, Known] | None = None) -> dict[str, Change]:
    changes: dict[str, Change] = {}
    for change in source.scan(known or {}):
        assert change.key not in changes, f"{change.key} yielded twice"
        changes[change.key] = change
    return changes


def remember(changes: Mapping[str, Change], known: Mapping[str, Known] | None = None) -> dict[str, Known]:
    """What a collection records after a sync: the new bytes of Fetched, the stored copy of Unchanged."""
    out: dict[str, Known] = {}
    for key, c in changes.items():
        if isinstance(c, Fetched):
            out[key] = Known(c.token, read=lambda data=c.data: data)
        elif isinstance(c, Unchanged):
            out[key] = Known(c.token, read=(known or {})[key].read)
    return out


def keys(site: Site, *names: str) -> set[str]:
    return {site.url("/docs/" + n) for n in names}


def of_kind(changes: Mapping[str, Change], kind: type) -> set[str]:
    return {k for k, c in changes.items() if isinstance(c, kind)}


ALL = ("index.en.html", "apa.en.html", "pr01.en.html", "table.pdf", "new.html")


def test_first_crawl_robots_scope_redirect_canonical(site: Site) -> None:
    docs = site.root / "docs"
    apa = (docs / "apa.en.html").read_bytes()
    (docs / "alias.html").write_bytes(apa.replace(b"<head>", b'<head><link rel="canonical" href="apa.en.html"/>'))
    (docs / "style.css").write_text("body { color: black }")
    (docs / "index.en.html").write_text(page("A tiny site", [*BASE_LINKS, "alias.html", "style.css"]))
    source = WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST)
    changes = scan(source)

    assert set(changes) == keys(site, *ALL) and source.complete
    assert all(isinstance(c, Fetched) for c in changes.values())
    apa_doc = changes[site.url("/docs/apa.en.html")]
    assert isinstance(apa_doc, Fetched) and apa_doc.data == apa  # the first of two with one canonical wins
    pdf, index = changes[site.url("/docs/table.pdf")], changes[site.url("/docs/index.en.html")]
    assert isinstance(pdf, Fetched) and pdf.name == "table.pdf" and pdf.data.startswith(b"%PDF")
    assert isinstance(index, Fetched) and index.name == "index.en.html"
    assert index.link == index.origin == site.url("/docs/index.en.html")
    new = changes[site.url("/docs/new.html")]  # reached through the 301 from old.html: keyed by the final URL
    assert isinstance(new, Fetched) and new.link == new.origin == site.url("/docs/new.html")

    paths = site.paths()
    assert paths.count("/robots.txt") == 1 and paths.index("/robots.txt") == 0
    assert "/docs/private/secret.html" not in paths and "/outside.html" not in paths
    assert ("GET", "/docs/old.html", 301, USER_AGENT) in site.log
    assert "/docs/alias.html" in site.paths(status=200) and "/docs/style.css" in site.paths(status=200)
    assert {"/docs/ch01.en.html", "/docs/ch12.en.html"} <= set(site.paths(status=404))  # dead links: still complete
    assert len(paths) == len(set(paths)), "a URL was requested twice"
    assert {ua for *_, ua in site.log} == {USER_AGENT}
    assert site.url("/docs/style.css") not in source.fetched_urls
    assert set(source.fetched_urls) == keys(site, *ALL, "alias.html")


def test_recrawl_is_conditional_and_sees_changes(site: Site) -> None:
    source = WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST)
    known = remember(scan(source))
    mark = len(site.log)
    again = scan(source, known)

    assert set(again) == set(known) and source.complete
    assert all(isinstance(c, Unchanged) and c.token == known[k].token for k, c in again.items())
    assert source.fetched_urls == [] and site.paths(mark, status=200) == ["/robots.txt"]
    assert set(site.paths(mark, status=304)) == {urlsplit(k).path for k in known}  # old.html's 301 led to a 304
    known = remember(again, known)

    docs = site.root / "docs"
    apa = docs / "apa.en.html"
    apa.write_bytes(apa.read_bytes().replace(b"</body>", b"<p>A paragraph added since.</p></body>"))
    (docs / "added.html").write_text(page("A new page", ["index.en.html"]))
    (docs / "index.en.html").write_text(page("A tiny site", [*BASE_LINKS, "added.html"]))
    (docs / "pr01.en.html").unlink()  # still linked from the index: it answers 404 now
    changed = scan(source, known)

    assert of_kind(changed, Fetched) == keys(site, "index.en.html", "apa.en.html", "added.html")
    assert of_kind(changed, Unchanged) == keys(site, "table.pdf", "new.html")
    assert site.url("/docs/pr01.en.html") not in changed and source.complete


def test_same_bytes_without_validators_is_unchanged(site: Site) -> None:
    site.plain = True
    source = WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST)
    known = remember(scan(source))
    again = scan(source, known)
    assert set(again) == set(known) == keys(site, *ALL) and source.complete
    assert all(isinstance(c, Unchanged) for c in again.values())
    assert set(source.fetched_urls) == set(known)  # the bodies came again: only the sha256 says unchanged


def write_sitemaps(site: Site, lastmod: Mapping[str, str]) -> None:
    urls = "".join(f"<url><loc>{site.url(p)}</loc><lastmod>{m}</lastmod></url>" for p, m in lastmod.items())
    (site.root / "sitemap.xml").write_text('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns='
                                           f'"http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')
    (site.root / "sitemap-index.xml").write_text(  # no namespace here: both forms are read
        f"<sitemapindex><sitemap><loc>{site.url('/sitemap.xml')}</loc></sitemap></sitemapindex>")


def test_sitemap_lastmod_spares_requests(site: Site) -> None:
    lastmod = {"/docs/index.en.html": "2024-01-01", "/docs/apa.en.html": "2024-01-02",
               "/docs/pr01.en.html": "2024-01-03", "/docs/table.pdf": "2024-01-04",
               "/docs/private/secret.html": "2024-01-05", "/outside.html": "2024-01-06"}
    write_sitemaps(site, lastmod)
    source = WebSource(site.url("/docs/index.en.html"), sitemap=site.url("/sitemap-index.xml"), rate_per_host=FAST)
    first = scan(source)
    assert set(first) == keys(site, "index.en.html", "apa.en.html", "pr01.en.html", "table.pdf")
    assert all(isinstance(c, Fetched) for c in first.values()) and source.complete
    assert "/docs/old.html" not in site.paths()  # a sitemap scan follows no links
    assert "/docs/private/secret.html" not in site.paths() and "/outside.html" not in site.paths()

    apa = site.root / "docs" / "apa.en.html"
    apa.write_bytes(apa.read_bytes().replace(b"</body>", b"<p>Revised.</p></body>"))
    write_sitemaps(site, {**lastmod, "/docs/apa.en.html": "2024-02-01"})
    mark = len(site.log)
    second = scan(source, remember(first))
    assert site.paths(mark) == ["/sitemap-index.xml", "/sitemap.xml", "/robots.txt", "/docs/apa.en.html"]
    assert of_kind(second, Fetched) == keys(site, "apa.en.html") and source.complete
    assert of_kind(second, Unchanged) == keys(site, "index.en.html", "pr01.en.html", "table.pdf")


def test_rate_limit_spaces_requests(site: Site) -> None:
    rate = 20.0
    source = WebSource(site.url("/docs/index.en.html"), rate_per_host=rate)
    started = time.monotonic()
    scan(source)
    elapsed = time.monotonic() - started
    n = len(site.log)
    assert n >= 8 and elapsed >= (n - 1) / rate


def test_unreachable_origins(site: Site) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    with pytest.raises(Unreachable, match=f"127.0.0.1:{port}/docs/"):
        scan(WebSource(f"http://127.0.0.1:{port}/docs/", rate_per_host=FAST, timeout=2))

    site.status["/docs/index.en.html"] = 503
    with pytest.raises(Unreachable, match="index.en.html"):
        scan(WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST))
    site.status = {"/robots.txt": 500}  # as Google: a broken robots.txt means do not crawl now
    with pytest.raises(Unreachable, match="robots.txt"):
        scan(WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST))
    site.status = {"/sitemap.xml": 404}
    with pytest.raises(Unreachable, match="sitemap"):
        scan(WebSource(site.url("/docs/index.en.html"), sitemap=site.url("/sitemap.xml"), rate_per_host=FAST))


def test_failing_pages_make_the_scan_incomplete(site: Site) -> None:
    site.status["/docs/pr01.en.html"] = 500
    site.delay["/docs/apa.en.html"] = 1.5
    source = WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST, timeout=0.4)
    changes = scan(source)
    assert of_kind(changes, Failed) == keys(site, "pr01.en.html", "apa.en.html") and not source.complete
    assert "500" in changes[site.url("/docs/pr01.en.html")].error  # type: ignore[union-attr]
    assert of_kind(changes, Fetched) == keys(site, "index.en.html", "table.pdf", "new.html")


def test_limits(site: Site) -> None:
    site.no_length.add("/docs/pr01.en.html")  # counted while streaming; the PDF is refused on its Content-Length
    source = WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST, max_bytes=20_000)
    changes = scan(source)
    assert of_kind(changes, Failed) == keys(site, "pr01.en.html", "table.pdf") and not source.complete
    assert {c.error for c in changes.values() if isinstance(c, Failed)} == {"larger than 20000 bytes"}
    assert of_kind(changes, Fetched) == keys(site, "index.en.html", "apa.en.html", "new.html")

    source = WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST, max_pages=2)
    assert len(scan(source)) == 2 and not source.complete


def test_missing_robots_txt_allows_everything(site: Site) -> None:
    (site.root / "robots.txt").unlink()
    source = WebSource(site.url("/docs/index.en.html"), rate_per_host=FAST)
    assert set(scan(source)) == keys(site, *ALL, "private/secret.html") and source.complete
    assert site.log[0][1:3] == ("/robots.txt", 404)
