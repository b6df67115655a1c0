"""A polite web crawler as an Upstream: robots.txt, a per-host rate limit, conditional requests, and either a
breadth-first walk of the links under a prefix or a sitemap's list of URLs.

The version token is compact JSON: the validators the server gave (etag, last_modified), the sitemap's lastmod,
the body's sha256, and `via`, the URL that was requested when the document's key is another (a redirect's target,
a canonical URL), so that the next scan can send that URL the validators of the document it leads to.
"""

from __future__ import annotations

import hashlib
import json
import time
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx
import lxml.html
from lxml import etree

from citerag.sources.base import USER_AGENT, Change, Failed, Fetched, Known, Unchanged, Unreachable

HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)  # not 304, which httpx's is_redirect counts
UA = {"User-Agent": USER_AGENT}


class _PageError(Exception):
    """One URL could not be read this time (transport error, timeout, 5xx, 429)."""


class _TooLarge(_PageError):
    """The body is over max_bytes: the page's fault, not the host's, so never Unreachable."""


@dataclass
class _Reply:
    status: int  # 200, 304, or anything else (gone, forbidden, redirected out of scope): not a document
    url: str  # the final URL after redirects
    headers: httpx.Headers
    body: bytes = b""
    kind: str = ""  # "html" or "pdf"; "" for a type we do not index (its body is never downloaded)


def _token(fields: Mapping[str, str]) -> str:
    return json.dumps({k: v for k, v in fields.items() if v}, sort_keys=True, separators=(",", ":"))


def _fields(token: str) -> dict[str, str]:
    try:
        data = json.loads(token)
    except ValueError:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _norm(base: str, href: str) -> str:
    """An absolute http(s) URL without its fragment ('#a' and '#b' are one page), or '' for anything else."""
    if not href.strip():
        return ""
    try:
        url = urldefrag(urljoin(base, href.strip())).url
        return url if urlsplit(url).scheme in ("http", "https") else ""
    except ValueError:
        return ""


def _links(body: bytes, url: str) -> tuple[list[str], str]:
    """The page's <a href> targets and its canonical URL ('' when none)."""
    if body.startswith(b"%PDF-"):
        return [], ""
    try:
        doc = lxml.html.fromstring(body)
    except (etree.ParserError, ValueError):
        return [], ""
    base = next((urljoin(url, el.get("href") or "") for el in doc.iter("base")), url)
    canonical = next((_norm(base, el.get("href") or "") for el in doc.iter("link")
                      if "canonical" in (el.get("rel") or "").lower().split()), "")
    return [u for el in doc.iter("a") if (u := _norm(base, el.get("href") or ""))], canonical


def _name(url: str, kind: str) -> str:
    segment = urlsplit(url).path.rsplit("/", 1)[-1] or "index"
    return segment if segment.lower().endswith("." + kind) else f"{segment}.{kind}"


def _local(tag: object) -> str:
    return str(tag).rsplit("}", 1)[-1]  # sitemaps come with or without the sitemaps.org namespace


def _why(error: Exception) -> str:
    text = str(error).strip().splitlines()
    if isinstance(error, _PageError):
        return text[0]
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class WebSource:
    """The pages under `prefix` (default: the start URL's folder) of one site, by crawling or from a sitemap."""

    def __init__(self, start_url: str, *, sitemap: str | None = None, prefix: str | None = None,
                 rate_per_host: float = 4.0, max_pages: int = 500, max_bytes: int = 20_000_000,
                 timeout: float = 20.0, client: httpx.Client | None = None) -> None:
        start_url = urldefrag(start_url).url
        self.start_url = start_url if urlsplit(start_url).path else start_url + "/"
        self.sitemap = sitemap
        self.prefix = prefix or self.start_url[: self.start_url.rfind("/") + 1]
        self.rate_per_host, self.max_pages, self.max_bytes, self.timeout = rate_per_host, max_pages, max_bytes, timeout
        self.complete = False
        self.fetched_urls: list[str] = []  # pages whose 200 body this scan downloaded (not robots.txt, sitemaps)
        self._client = client
        self._host = urlsplit(self.start_url)[:2]
        self._robots: dict[str, RobotFileParser] = {}
        self._last: dict[str, float] = {}  # host -> time.monotonic() of its last request; kept across scans
        self._ok = True

    def scan(self, known: Mapping[str, Known]) -> Iterator[Change]:
        """Yields a Change per document; raises Unreachable when the start URL or the sitemap cannot be read."""
        self.complete, self._ok, self.fetched_urls, self._robots = False, True, [], {}
        client = self._client or httpx.Client(timeout=self.timeout, headers=UA)
        try:
            by_url = {k: k for k in known}  # URL -> the known key whose validators it is sent
            for key, k in known.items():
                via = _fields(k.token).get("via", "")
                if via:
                    by_url.setdefault(via, key)
            listed = self._sitemap(client, self.sitemap, top=True) if self.sitemap else None
            yield from self._walk(client, known, by_url, listed)
            self.complete = self._ok  # only an exhausted scan can be complete
        finally:
            if self._client is None:
                client.close()

    def _in_scope(self, url: str) -> bool:
        return url.startswith(self.prefix) and urlsplit(url)[:2] == self._host

    def _walk(self, client: httpx.Client, known: Mapping[str, Known], by_url: dict[str, str],
              listed: list[tuple[str, str]] | None) -> Iterator[Change]:
        entries = dict(listed if listed is not None else [(self.start_url, "")])  # URL -> sitemap lastmod or ''
        queue, seen = deque(entries.items()), set(entries)
        done: set[str] = set()  # keys yielded: a second URL with the same canonical is ignored
        count = 0
        while queue:
            if count >= self.max_pages:
                self._ok = False
                return
            url, lastmod = queue.popleft()
            is_start = listed is None and url == self.start_url
            if not self._allowed(client, url):
                if is_start:
                    raise Unreachable(f"robots.txt disallows the start URL {url}")
                continue
            kkey = by_url.get(url, "")
            old = _fields(known[kkey].token) if kkey else {}
            if lastmod and kkey and old.get("lastmod") == lastmod:
                if kkey not in done:  # the sitemap says unchanged: no request at all
                    done.add(kkey)
                    count += 1
                    yield Unchanged(kkey, known[kkey].token)
                continue
            try:
                reply = self._get(client, url, old)
            except _PageError as e:
                if is_start and not isinstance(e, _TooLarge):
                    raise Unreachable(f"cannot read {url}: {e}") from None
                self._ok = False
                count += 1
                yield Failed(kkey or url, str(e))
                continue
            if is_start and reply.status not in (200, 304):
                raise Unreachable(f"cannot read {url}: HTTP {reply.status}")
            seen.add(reply.url)
            fields = {"etag": reply.headers.get("etag", ""), "last_modified": reply.headers.get("last-modified", ""),
                      "lastmod": lastmod}
            if reply.status == 304 and kkey:
                key, change = kkey, None
                links = _links(known[kkey].read() or b"", reply.url)[0]  # the stored copy's links: walk on
                token = _token({**old, **{k: v for k, v in fields.items() if v}})
            elif reply.status == 200 and reply.kind:
                key, body = reply.url, reply.body
                links, canonical = _links(body, reply.url) if reply.kind == "html" else ([], "")
                if canonical and self._in_scope(canonical):
                    key = canonical
                sha = hashlib.sha256(body).hexdigest()
                token = _token({**fields, "sha256": sha, "via": url if url != key else ""})
                prior = _fields(known[key].token).get("sha256") if key in known else None
                change = None if prior == sha else Fetched(key, token, _name(reply.url, reply.kind), body,
                                                         link=reply.url, origin=key)
            else:
                continue  # gone (404, 410), not ours to read (401, 403), out of scope, or a type we skip
            if key not in done:
                done.add(key)
                count += 1
                yield change or Unchanged(key, token)
            if listed is None:
                for link in links:
                    if link not in seen and self._in_scope(link):
                        seen.add(link)
                        queue.append((link, ""))

    def _pace(self, url: str) -> None:
        host = urlsplit(url).netloc
        gap = 1.0 / self.rate_per_host if self.rate_per_host > 0 else 0.0
        wait = self._last.get(host, -gap) + gap - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._last[host] = time.monotonic()

    def _allowed(self, client: httpx.Client, url: str) -> bool:
        parts = urlsplit(url)
        root = f"{parts.scheme}://{parts.netloc}"
        if root not in self._robots:
            self._robots[root] = self._read_robots(client, root + "/robots.txt")
        return self._robots[root].can_fetch(USER_AGENT, url)

    def _read_robots(self, client: httpx.Client, url: str) -> RobotFileParser:
        """As Google: a 4xx means no rules; a 5xx (or no answer) means the host must not be crawled now."""
        self._pace(url)
        try:
            r = client.get(url, headers=UA, follow_redirects=True)
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            raise Unreachable(f"cannot reach {self.start_url}: {url}: {_why(e)}") from None
        if r.status_code >= 500 or r.status_code == 429:
            raise Unreachable(f"cannot crawl {self.start_url}: {url} answers HTTP {r.status_code}")
        parser = RobotFileParser(url)
        parser.parse(r.text.splitlines() if r.status_code == 200 else [])
        return parser

    def _get(self, client: httpx.Client, url: str, old: Mapping[str, str]) -> _Reply:
        """GET with the known validators, following redirects by hand so that no hop leaves the scope or robots."""
        headers = dict(UA)
        if old.get("etag"):
            headers["If-None-Match"] = old["etag"]
        if old.get("last_modified"):
            headers["If-Modified-Since"] = old["last_modified"]
        for _ in range(MAX_REDIRECTS + 1):
            self._pace(url)
            try:
                with client.stream("GET", url, headers=headers, follow_redirects=False) as r:
                    if r.status_code >= 500 or r.status_code == 429:
                        raise _PageError(f"HTTP {r.status_code}")
                    if r.status_code not in REDIRECTS or "location" not in r.headers:
                        return self._read(r, url) if r.status_code == 200 else _Reply(r.status_code, url, r.headers)
                    target = _norm(url, r.headers["location"])
            except (httpx.HTTPError, httpx.InvalidURL) as e:
                raise _PageError(_why(e)) from None
            if not (target and self._in_scope(target) and self._allowed(client, target)):
                return _Reply(r.status_code, target, r.headers)
            url = target
        raise _PageError(f"more than {MAX_REDIRECTS} redirects")

    def _read(self, r: httpx.Response, url: str) -> _Reply:
        ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
        kind = "html" if ctype in HTML_TYPES else "pdf" if ctype == "application/pdf" else ""
        if not kind:
            return _Reply(200, url, r.headers)
        too_large = _TooLarge(f"larger than {self.max_bytes} bytes")
        length = r.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise too_large
        chunks, size = [], 0
        for chunk in r.iter_bytes():  # the length header may be absent or lie: count what arrives
            size += len(chunk)
            if size > self.max_bytes:
                raise too_large
            chunks.append(chunk)
        self.fetched_urls.append(url)
        return _Reply(200, url, r.headers, b"".join(chunks), kind)

    def _sitemap(self, client: httpx.Client, url: str, *, top: bool) -> list[tuple[str, str]]:
        """(URL, lastmod) of the in-scope entries; a sitemap index is followed one level down. A child sitemap
        that fails makes the scan incomplete; the top one failing means the origin cannot be read."""
        self._pace(url)
        try:
            r = client.get(url, headers=UA, follow_redirects=True)
            if r.status_code != 200:
                raise _PageError(f"HTTP {r.status_code}")
            root = ET.fromstring(r.content)
        except (httpx.HTTPError, httpx.InvalidURL, ET.ParseError, _PageError) as e:
            if top:
                raise Unreachable(f"cannot read the sitemap {url}: {_why(e)}") from None
            self._ok = False
            return []
        entries: list[tuple[str, str]] = []
        for node in root:
            text = {_local(c.tag): (c.text or "").strip() for c in node}
            loc = _norm(url, text.get("loc", ""))
            if loc and _local(root.tag) == "sitemapindex":
                if top:
                    entries += self._sitemap(client, loc, top=False)
            elif loc and self._in_scope(loc):
                entries.append((loc, text.get("lastmod", "")))
        return entries
