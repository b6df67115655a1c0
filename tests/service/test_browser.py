"""The web page in a real headless Chromium (Debian's, driven by Playwright; no browser download): sign in with a
key, ask a dev-set question, click [1] and land on the original HTML page with the quote highlighted by its text
fragment; the canonical-text view marks exactly the quote; a refusal shows no sources; server text is never markup.

A screenshot of the answered page is kept in the test's tmp folder; to refresh the README's picture:

    CITERAG_SCREENSHOT_DIR=docs/img .venv/bin/python -m pytest tests/service/test_browser.py
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from live import wait_settled
from PIL import Image
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, ViewportSize, expect
from service_fixtures import Deployment

from corpus_paths import DEV_SET
from system_tools import needs_chromium

VIEWPORT: ViewportSize = {"width": 1200, "height": 900}
SCREENSHOT = "service-answer.png"  # the README's picture, under $CITERAG_SCREENSHOT_DIR
# Chromium paints a text fragment's match with ::target-text; recoloured (through DevTools, past the page's CSP) to
# a colour nothing else on the page has, its pixels show the highlight really is drawn, and where.
HIGHLIGHT = (255, 0, 255)
XSS_COLLECTION = "browser-escaping"
XSS_TITLE = '<script>window.__xss=1</script> <img src=x onerror="window.__xss=2">'
XSS_BODY = 'The zorblax flux capacitor is recalibrated with <script>window.__xss=3</script> and ' \
           '<img src=x onerror="window.__xss=4"> every full moon, says the zorblax maintenance guide.'
XSS_NAME = "<img src=x onerror=window.__xss=5>.md"


def _dev_item(file: str, item_id: str) -> dict[str, Any]:
    for line in (DEV_SET / file).read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["id"] == item_id:
            return dict(item)
    raise LookupError(f"{item_id} not in {file}")


# Answered from ch03 (the red dot of `systemctl status`), and one out-of-domain question the service refuses.
QUESTION = _dev_item("questions.jsonl", "dr-12-doc")
OUT_OF_DOMAIN = _dev_item("ood.jsonl", "dr-ood-01")

# Where the original page's first match is, once Chromium has scrolled to it: the :target element it set, and the
# text node holding the quote's first words (whitespace collapsed, as a text directive matches).
FIND_QUOTE = """(first) => {
  const norm = (s) => s.replace(/\\s+/g, " ");
  const target = document.querySelector(":target");
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const found = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (norm(n.data).includes(first)) found.push(n);
  }
  const node = found.find((n) => target && target.contains(n)) || null;
  let rect = null;
  if (node) {
    const range = document.createRange();
    range.selectNodeContents(node);
    const r = range.getBoundingClientRect();
    rect = {top: r.top, bottom: r.bottom};
  }
  return {scrollY: window.scrollY, innerHeight: window.innerHeight, target: target ? target.tagName : null,
          matches: found.length, inTarget: node !== null, rect};
}"""
IN_VIEWPORT = "(e) => { const r = e.getBoundingClientRect(); return r.bottom > 0 && r.top < window.innerHeight; }"
# A securitypolicyviolation anywhere in a page of ours is reported to the test (a binding, so CSP cannot block it).
CSP_LISTENER = """document.addEventListener("securitypolicyviolation", (e) => {
  window.__citeragCsp(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`);
}, true);"""


@dataclass
class Watched:
    """A browser context on the server, with every console error, page error and CSP violation it met."""

    context: BrowserContext
    page: Page
    base: str
    problems: list[tuple[str, str]] = field(default_factory=list)  # (page URL, what happened)

    def ours(self) -> list[tuple[str, str]]:
        """The problems on citerag's own pages. An original file is served sandboxed (no scripts, no subresources
        but data: images), so its own stylesheet and images being blocked there is the point, not a fault."""
        return [(url, what) for url, what in self.problems if not urlsplit(url).path.endswith("/file")]


@pytest.fixture()
def watched(browser: Browser, deployment: Deployment) -> Iterator[Watched]:
    context = browser.new_context(viewport=VIEWPORT, base_url=deployment.server.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    watch = Watched(context, page, deployment.server.url)

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            url = message.location.get("url") or (message.page.url if message.page else "")
            watch.problems.append((url, f"console error: {message.text}"))

    context.expose_binding("__citeragCsp", lambda source, what: watch.problems.append(
        (source["frame"].url, f"CSP violation: {what}")))
    context.add_init_script(CSP_LISTENER)
    context.on("console", console)
    context.on("weberror", lambda error: watch.problems.append((error.page.url if error.page else "",
                                                                 f"page error: {error.error}")))
    try:
        yield watch
    finally:
        context.close()


def _sign_in(page: Page, key: str, collection: str) -> None:
    """Through the page's key form (the key opens a session, in an HttpOnly cookie), then pick the collection."""
    page.goto("/")
    expect(page.locator("#key-form")).to_be_visible()
    page.fill("#key", key)
    page.click("#key-submit")
    expect(page.locator("#app")).to_be_visible()
    expect(page.locator("#key-form")).to_be_hidden()
    [cookie] = [c for c in page.context.cookies() if c["name"] == "citerag_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
    assert key not in cookie["value"] and cookie["value"].startswith("crs_"), "a session reference, not the key"
    assert "citerag_session" not in page.evaluate("() => document.cookie")  # out of the page's scripts' reach
    page.wait_for_selector(f"#collection option[value='{collection}']", state="attached")
    page.select_option("#collection", collection)
    expect(page.locator("#documents tbody tr").first).to_be_visible()


def _ask(page: Page, question: str) -> dict[str, Any]:
    """Ask through the page (a turn of its conversation, streamed); the turn the page rendered, as the server kept
    it (read back with the page's own session), with the conversation's id and the query under "conversation"."""
    turns = page.locator("#thread .turn")
    before = turns.count()
    page.fill("#question", question)
    with page.expect_response(lambda r: r.request.method == "POST" and "/conversations" in r.url) as response:
        page.click("#ask")
    assert response.value.status == 200
    assert response.value.headers["content-type"].startswith("text/event-stream")
    expect(turns).to_have_count(before + 1)
    expect(turns.last.locator(".answer, .refusal")).to_be_visible()
    expect(page.locator("#ask")).to_be_enabled()
    cid = page.url.rpartition("#conversation=")[2]
    collection = page.locator("#collection").input_value()
    kept = page.request.get(f"/v1/collections/{collection}/conversations/{cid}")
    assert kept.ok, kept.text()
    turn: dict[str, Any] = kept.json()["turns"][-1]
    assert turn["question"] == question and turn["n"] == before + 1
    turn["conversation"] = {"id": cid, "query": turn["query"]}
    return turn


def _keep(page: Page, path: Path, *, readme: bool = False) -> None:
    page.screenshot(path=path, full_page=True)
    if readme and (folder := os.environ.get("CITERAG_SCREENSHOT_DIR")):
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(folder) / SCREENSHOT)


def _highlight_rows(page: Page) -> list[int]:
    """The viewport rows where Chromium paints the text fragment's match (::target-text, recoloured)."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        frame = cdp.send("Page.getFrameTree")["frameTree"]["frame"]["id"]
        sheet = cdp.send("CSS.createStyleSheet", {"frameId": frame})["styleSheetId"]
        rule = f"::target-text {{ background-color: rgb{HIGHLIGHT} !important; }}"
        cdp.send("CSS.addRule", {"styleSheetId": sheet, "ruleText": rule,
                                 "location": {"startLine": 0, "startColumn": 0, "endLine": 0, "endColumn": 0}})
    finally:
        cdp.detach()
    image = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    width, height = image.size
    pixels = image.load()
    assert pixels is not None
    return [y for y in range(height) if sum(pixels[x, y] == HIGHLIGHT for x in range(0, width, 2)) >= 10]


def _wait(condition: Any, what: str, timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


@needs_chromium
def test_answer_marker_opens_the_original_at_the_highlighted_quote(watched: Watched, deployment: Deployment,
                                                                 tmp_path: Path) -> None:
    page = watched.page
    _sign_in(page, deployment.reader_a, "default")
    answer = _ask(page, QUESTION["query"])

    assert not answer["refused"], answer["answer"]
    first = answer["citations"][0]
    assert first["index"] == 1 and first["document_name"] == QUESTION["source"] == "ch03.en.html"
    assert QUESTION["needle"] in first["quote"]
    turn = page.locator("#thread .turn").last
    expect(turn.locator(".answer-text")).to_contain_text(QUESTION["needle"])
    marker = turn.locator("a.marker[data-testid=marker-1]").first
    expect(marker).to_have_text("[1]")
    assert marker.get_attribute("href") == first["href"]
    assert "/file#:~:text=" in first["href"]  # an HTML source: the original page at a text fragment
    expect(turn.locator("table.sources")).to_be_visible()
    expect(turn.locator("table.sources tbody tr")).to_have_count(len(answer["citations"]))
    expect(page.locator("tr#t1-source-1 a[data-testid=source-link-1]")).to_have_attribute("href", first["href"])
    expect(page.locator("tr#t1-source-1")).to_contain_text(QUESTION["source"])
    _keep(page, tmp_path / SCREENSHOT, readme=True)
    assert watched.ours() == [], watched.ours()

    # [1] opens the side pane: the source's text around the quote, the quote marked, a link to the original.
    marker.click()
    expect(page.locator("#pane")).to_be_visible()
    expect(page.locator("#pane mark#pane-quote")).to_be_visible()
    assert page.locator("#pane mark#pane-quote").evaluate("(m) => m.textContent") == first["quote"]
    expect(page.locator("#pane-where")).to_contain_text(QUESTION["source"])
    original = page.locator("#pane a#pane-original")
    expect(original).to_have_attribute("href", first["href"])

    # The pane's link opens the original HTML (sandboxed); Chromium scrolls to the text fragment and highlights it.
    original.click()
    page.wait_for_url(lambda url: url == watched.base + first["href"])
    words = " ".join(first["quote"].split()[:4])
    found = _wait(lambda: (f := page.evaluate(FIND_QUOTE, words))["scrollY"] > 0 and f["inTarget"] and f,
                  "Chromium to scroll to the text fragment and set :target on the match")
    assert found["target"] is not None and found["rect"] is not None, found
    assert 0 <= found["rect"]["top"] < found["rect"]["bottom"] <= found["innerHeight"], found
    page.screenshot(path=tmp_path / "original-at-quote.png")
    rows = _highlight_rows(page)
    assert len(rows) >= 10, "Chromium painted no text-fragment highlight (::target-text)"
    assert found["rect"]["top"] - 4 <= rows[0] <= found["rect"]["bottom"], (rows[0], found)

    # The canonical-text view marks exactly the cited range and scrolls it into view.
    page.goto(first["text_href"])
    quote = page.locator("pre#text mark#quote")
    expect(quote).to_be_visible()
    assert quote.evaluate("(m) => m.textContent") == first["quote"]
    _wait(lambda: quote.evaluate(IN_VIEWPORT), "the view to scroll the quote into the viewport")
    assert page.evaluate("() => window.scrollY") > 0
    expect(page.locator("#doc-title")).not_to_have_text("Loading…")
    page.screenshot(path=tmp_path / "view-at-quote.png")
    assert watched.ours() == [], watched.ours()


@needs_chromium
def test_out_of_domain_question_shows_the_refusal_and_no_sources(watched: Watched, deployment: Deployment) -> None:
    with deployment.server.client(deployment.reader_a) as api:
        expected = api.post("/v1/collections/default/ask", json={"question": OUT_OF_DOMAIN["query"]}).json()
    assert expected["refused"], f"{OUT_OF_DOMAIN['id']} is answered; pick a question the service refuses"
    page = watched.page
    _sign_in(page, deployment.reader_a, "default")
    answer = _ask(page, OUT_OF_DOMAIN["query"])
    assert answer["refused"] and answer["citations"] == []
    refusal = page.locator("#thread .turn .refusal")
    expect(refusal).to_be_visible()
    expect(refusal).to_contain_text("No answer")
    expect(refusal).to_contain_text(answer["answer"])
    expect(page.locator("table.sources")).to_have_count(0)
    expect(page.locator("a.marker")).to_have_count(0)
    assert watched.ours() == [], watched.ours()


@pytest.fixture()
def hostile_collection(deployment: Deployment) -> Iterator[dict[str, Any]]:
    """A collection of its own (so the other tests never see it) with one Markdown file whose name, title and
    text are markup; dropped afterwards."""
    document = f"# {XSS_TITLE}\n\n{XSS_BODY}\n"
    with deployment.server.client(deployment.admin) as api:
        assert api.post("/v1/collections", json={"name": XSS_COLLECTION}).status_code == 201
        try:
            response = api.post(f"/v1/collections/{XSS_COLLECTION}/documents",
                                files=[("files", (XSS_NAME, document.encode()))])
            assert response.status_code == 202, response.text
            [doc] = wait_settled(api, XSS_COLLECTION, [d["id"] for d in response.json()["documents"]])
            assert doc["status"] == "indexed" and doc["name"] == XSS_NAME and doc["title"] == XSS_TITLE, doc
            yield doc
        finally:
            assert api.delete(f"/v1/collections/{XSS_COLLECTION}").status_code == 204


@needs_chromium
def test_server_text_is_shown_as_text_never_run(watched: Watched, deployment: Deployment,
                                                 hostile_collection: dict[str, Any]) -> None:
    page = watched.page
    never_ran = "() => window.__xss === undefined && document.querySelectorAll('img[src=x], body script').length === 0"
    _sign_in(page, deployment.admin, XSS_COLLECTION)

    row = page.locator(f"#documents tr#doc-{hostile_collection['id']}")
    expect(row).to_contain_text(XSS_NAME)
    expect(row).to_contain_text(XSS_TITLE)
    answer = _ask(page, "How is the zorblax flux capacitor recalibrated?")
    assert not answer["refused"] and answer["citations"][0]["document_id"] == hostile_collection["id"]
    expect(page.locator("#thread .turn .answer-text")).to_contain_text("<img src=x onerror=")
    expect(page.locator("tr#t1-source-1")).to_contain_text(XSS_NAME)
    expect(page.locator("tr#t1-source-1 td.quote")).to_contain_text(XSS_BODY)
    page.locator("a.marker[data-testid=marker-1]").first.click()  # the pane shows the same text as text
    expect(page.locator("#pane-quote")).to_contain_text(XSS_BODY)
    expect(page.locator("#pane-where")).to_contain_text(XSS_NAME)
    expect(page.locator("#conversations")).to_contain_text("zorblax")
    assert page.evaluate(never_ran)

    page.goto(answer["citations"][0]["text_href"])
    expect(page.locator("#doc-title")).to_have_text(XSS_TITLE)
    quote = page.locator("mark#quote")
    expect(quote).to_contain_text(XSS_BODY)
    assert quote.evaluate("(m) => m.textContent") == answer["citations"][0]["quote"]
    assert page.evaluate(never_ran)
    # Markup that reached the DOM would have had its inline handlers blocked by the CSP: none may have been tried.
    assert watched.ours() == [], watched.ours()


UPLOAD_COLLECTION = "browser-upload"


@needs_chromium
def test_upload_through_the_page_shows_progress_live_status_and_retry(watched: Watched, deployment: Deployment,
                                                                     tmp_path: Path) -> None:
    good = tmp_path / "rig-notes.md"
    good.write_text("# Rig notes\n\nThe test rig's pump runs at 1200 rpm after the warm-up.\n", encoding="utf-8")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 this is not a PDF")
    with deployment.server.client(deployment.admin) as api:
        assert api.post("/v1/collections", json={"name": UPLOAD_COLLECTION}).status_code == 201
    try:
        page = watched.page
        _sign_in(page, deployment.admin, UPLOAD_COLLECTION)
        page.set_input_files("#files", [str(good), str(broken)])
        with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/documents")) as sent:
            page.click("#upload")
        assert sent.value.status == 202
        ids = {d["name"]: d["id"] for d in sent.value.json()["documents"]}
        # The list updates itself from the server-sent events: no reload, no click.
        items = page.locator("#upload-list li")
        expect(items).to_have_count(2)
        expect(items.filter(has_text="rig-notes.md")).to_contain_text("indexed", timeout=60_000)
        expect(items.filter(has_text="broken.pdf")).to_contain_text("failed", timeout=60_000)
        assert page.evaluate("() => document.getElementById('upload-progress').value") == 100
        failed_row = page.locator(f"#documents tr#doc-{ids['broken.pdf']}")
        expect(failed_row).to_contain_text("failed")
        with deployment.server.client(deployment.admin) as api:
            reason = api.get(f"/v1/collections/{UPLOAD_COLLECTION}/documents/{ids['broken.pdf']}").json()["error"]
        expect(failed_row).to_contain_text(reason[:40])
        with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/retry")) as retried:
            failed_row.get_by_role("button", name="Retry broken.pdf").click()
        assert retried.value.status == 202
        expect(page.locator(f"#documents tr#doc-{ids['broken.pdf']}")).to_contain_text("failed", timeout=60_000)
        expect(page.locator(f"#documents tr#doc-{ids['rig-notes.md']}")).to_contain_text("indexed")
        assert _ask(page, "How fast does the test rig's pump run after warm-up?")["citations"][0]["document_id"] \
            == ids["rig-notes.md"]
        assert watched.ours() == [], watched.ours()
    finally:
        with deployment.server.client(deployment.admin) as api:
            assert api.delete(f"/v1/collections/{UPLOAD_COLLECTION}").status_code == 204


# Dev set conversation dr-c17 (ch04) from its second turn: the follow-up's needle answers only with the earlier turn.
EARLIER = "Is it even easier if they can edit the GRUB menu entry?"
FOLLOW_UP = "Is there any software measure that stops all of this?"
FOLLOW_UP_NEEDLE = ("The only reasonable software solution to avoid all these concerns is to use software encrypted "
                    "root partition")
CHAT_SCREENSHOT = "chat-conversation.png"  # the README's picture of a conversation, under $CITERAG_SCREENSHOT_DIR


@needs_chromium
def test_a_two_turn_conversation_cites_the_follow_ups_passage_and_resumes_after_a_reload(
        watched: Watched, deployment: Deployment, tmp_path: Path) -> None:
    page = watched.page
    _sign_in(page, deployment.reader_a, "default")
    page.click("#new-conversation")
    first = _ask(page, EARLIER)
    cid = first["conversation"]["id"]
    assert page.url.endswith(f"#conversation={cid}")
    second = _ask(page, FOLLOW_UP)
    assert second["conversation"] == {"id": cid, "query": second["conversation"]["query"]}
    assert EARLIER in second["conversation"]["query"]  # the follow-up was searched with the earlier question
    [cited] = [c for c in second["citations"] if FOLLOW_UP_NEEDLE in " ".join(c["quote"].split())]
    turn = page.locator("#thread .turn").nth(1)
    expect(turn.locator(".question")).to_contain_text(FOLLOW_UP)
    # The query searched, on demand.
    query = turn.locator("details.searched .query")
    expect(query).to_be_hidden()
    turn.locator("details.searched summary").click()
    expect(query).to_be_visible()
    assert query.evaluate("(q) => q.textContent") == second["conversation"]["query"]
    # The cited passage in the side pane, the original one click away.
    marker = turn.locator(f"a.marker[data-testid=marker-{cited['index']}]")
    (marker if marker.count() else turn.locator(f"tr#t2-source-{cited['index']} th button")).first.click()
    expect(page.locator("#pane mark#pane-quote")).to_be_visible()
    assert page.locator("#pane-quote").evaluate("(m) => m.textContent") == cited["quote"]
    expect(page.locator("#pane a#pane-original")).to_have_attribute("href", cited["href"])
    assert page.locator("#pane-quote").evaluate(IN_VIEWPORT)
    turn.evaluate("(t) => window.scrollTo(0, t.getBoundingClientRect().top + window.scrollY - 120)")
    assert page.locator("#pane-quote").evaluate(IN_VIEWPORT)  # the pane is sticky: the quote stays in view
    page.screenshot(path=tmp_path / CHAT_SCREENSHOT)
    if folder := os.environ.get("CITERAG_SCREENSHOT_DIR"):
        shutil.copyfile(tmp_path / CHAT_SCREENSHOT, Path(folder) / CHAT_SCREENSHOT)
    listed = page.locator(f"#conversations button[data-id='{cid}']")
    expect(listed).to_contain_text(EARLIER)
    expect(listed).to_have_attribute("aria-current", "true")

    # A reload resumes the conversation from the URL; the next question continues it.
    page.reload()
    expect(page.locator("#thread .turn")).to_have_count(2)
    resumed = page.locator("#thread .turn").nth(1)
    expect(resumed.locator(".answer-text")).to_contain_text(second["answer"][:40])
    expect(resumed.locator("table.sources tbody tr")).to_have_count(len(second["citations"]))
    third = _ask(page, "And is that the only software measure?")
    assert third["conversation"]["id"] == cid
    with deployment.server.client(deployment.reader_a) as api:
        kept = api.get(f"/v1/collections/default/conversations/{cid}").json()
    assert [t["question"] for t in kept["turns"]] == [EARLIER, FOLLOW_UP, "And is that the only software measure?"]
    # Feedback on the follow-up's answer: the source that answered it, and "Helpful"; kept with its trace.
    bar = page.locator("#thread .turn").nth(1).locator(".feedback")
    bar.locator("select[data-testid=t2-right-source]").select_option(str(cited["index"]))
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/feedback")) as given:
        bar.locator("button[data-testid=t2-helpful]").click()
    assert given.value.status == 200, given.value.text()
    expect(bar.locator("[role=status]")).to_have_text("Thanks: kept as helpful.")
    expect(bar.locator("button[data-testid=t2-unhelpful]")).to_be_disabled()
    with deployment.server.client(deployment.reader_a) as api:
        record = api.get(f"/v1/traces/{second['trace_id']}").json()
    assert [(f["helpful"], f["source"], f["none_right"]) for f in record["feedback"]] == [(True, cited["index"], False)]
    # "New" starts another; the old one is still listed and opens again.
    page.click("#new-conversation")
    expect(page.locator("#thread .turn")).to_have_count(0)
    page.locator(f"#conversations button[data-id='{cid}']").click()
    expect(page.locator("#thread .turn")).to_have_count(3)
    assert watched.ours() == [], watched.ours()


@needs_chromium
def test_an_admin_sees_the_sources_and_syncs_one_a_reader_does_not(watched: Watched, deployment: Deployment) -> None:
    """default's source (a website on a closed port) in the page's Sources table for an admin: synced from the
    page, its failure and backoff shown; a reader's page has no Sources section."""
    page = watched.page
    _sign_in(page, deployment.reader_a, "default")
    expect(page.locator("#documents tbody tr").first).to_be_visible()
    expect(page.locator("#sources-section")).to_be_hidden()
    page.click("#sign-out")
    # The form shows once the session's DELETE has answered: navigating earlier races it, and the old page's
    # requests then meet a 401 mid-load (a console error).
    expect(page.locator("#key-form")).to_be_visible()
    _sign_in(page, deployment.admin, "default")
    row = page.locator("#sources tr#source-handbook")
    expect(row).to_be_visible()
    expect(row).to_contain_text("web")
    expect(row).to_contain_text("http://127.0.0.1:9/handbook/")
    row.get_by_role("button", name="Sync handbook now").click()
    expect(row).to_contain_text("failed", timeout=20_000)  # the page reloads the table after the sync
    expect(row).to_contain_text("127.0.0.1:9")
    with deployment.server.client(deployment.admin) as api:
        shown = api.get("/v1/collections/default/sources/handbook").json()
    assert shown["failures"] >= 1 and shown["next_run"], shown
    expect(row.locator("td").nth(5)).to_have_text(shown["next_run"])
    assert watched.ours() == []


@needs_chromium
def test_the_page_offers_the_collections_formats_and_sources_and_asks_within_them(watched: Watched,
                                                                                deployment: Deployment) -> None:
    """The "Search only" choices come from the documents listed; a question answered only by the HTML chapters is
    refused within the PDF and answered within HTML, each filter sent with the turn."""
    page = watched.page
    _sign_in(page, deployment.reader_a, "default")
    expect(page.locator("#documents tbody tr").first).to_be_visible()
    formats = page.locator("#filter-type option")
    expect(formats).not_to_have_count(1)
    assert {"", "html", "pdf", "docx", "xlsx", "transcript"} <= set(formats.evaluate_all("os => os.map(o => o.value)"))
    assert "upload" in page.locator("#filter-source option").evaluate_all("os => os.map(o => o.value)")
    sent: list[dict[str, Any]] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.method == "POST" and "/conversations" in r.url
            else None)
    page.select_option("#filter-type", "pdf")
    refused = _ask(page, QUESTION["query"])
    assert refused["refused"] and refused["citations"] == []
    expect(page.locator("#thread .turn .refusal")).to_be_visible()
    page.click("#new-conversation")
    page.select_option("#filter-type", "html")
    answered = _ask(page, QUESTION["query"])
    assert not answered["refused"] and answered["citations"]
    html = {d["name"] for d in page.request.get("/v1/collections/default/documents").json()["documents"]
            if d["stamps"].get("extractor") == "html"}
    assert {c["document_name"] for c in answered["citations"]} <= html
    assert [body.get("filters") for body in sent] == [{"type": "pdf"}, {"type": "html"}]
    assert watched.ours() == [], watched.ours()
