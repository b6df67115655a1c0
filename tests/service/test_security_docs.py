"""/docs works offline and under the service's own CSP (issue 25, case 11): Swagger UI comes from the installed
fastapi-offline wheel, started by a script file, so Chromium, cut off from everything but the server, renders every
operation, runs one with "Try it out", and reports no CSP violation and no request that left the server."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect
from service_fixtures import Deployment

from citerag.service.app import CSP
from system_tools import needs_chromium

CSP_LISTENER = """document.addEventListener("securitypolicyviolation", (e) => {
  window.__citeragCsp(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"}`);
}, true);"""


def test_docs_page_names_only_its_own_files_and_has_the_csp(deployment: Deployment) -> None:
    with httpx.Client(base_url=deployment.server.url) as c:
        page = c.get("/docs")
        assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
        assert "<script>" not in page.text and "cdn" not in page.text.lower()
        for asset in ("/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css", "/static/docs.js"):
            assert asset in page.text
            served = c.get(asset)
            assert served.status_code == 200 and len(served.content) > 100, asset
        assert c.get("/redoc").status_code == 404  # FastAPI's CDN page is off


@pytest.fixture()
def offline_page(browser: Browser, deployment: Deployment) -> Iterator[tuple[Page, list[str]]]:
    problems: list[str] = []
    origin = urlsplit(deployment.server.url).netloc
    context = browser.new_context(base_url=deployment.server.url)
    context.set_default_timeout(15_000)

    def only_the_server(route: Route) -> None:
        if urlsplit(route.request.url).netloc != origin and not route.request.url.startswith("data:"):
            problems.append(f"request left the server: {route.request.url}")
            route.abort()
        else:
            route.continue_()

    context.route("**/*", only_the_server)
    context.expose_binding("__citeragCsp", lambda source, what: problems.append(f"CSP violation: {what}"))
    context.add_init_script(CSP_LISTENER)
    context.on("weberror", lambda error: problems.append(f"page error: {error.error}"))
    try:
        yield context.new_page(), problems
    finally:
        context.close()


@needs_chromium
def test_swagger_ui_renders_every_operation_offline_under_the_csp(offline_page: tuple[Page, list[str]],
                                                                   deployment: Deployment) -> None:
    page, problems = offline_page
    operations = sum(len(methods) for methods in httpx.get(f"{deployment.server.url}/openapi.json")
                     .json()["paths"].values())
    page.goto("/docs")
    expect(page.locator(".opblock")).to_have_count(operations)
    health = page.locator(".opblock-get", has_text="/healthz")
    health.locator(".opblock-summary").click()
    health.get_by_role("button", name="Try it out").click()
    health.get_by_role("button", name="Execute").click()
    expect(health.locator(".live-responses-table tbody .response-col_status").first).to_have_text("200")
    assert problems == []
