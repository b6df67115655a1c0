"""The MCP server through the official `mcp` SDK's client, both transports: `citerag mcp` over stdio (a real
subprocess on the shared deployment's home) and streamable HTTP at /mcp on the real server, where the key's
collection decides what a client sees, as on the REST routes."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from service_fixtures import Deployment

TOOLS = {"search", "ask", "list_collections", "read_document"}
QUESTION = "What unit state is signalled by a red dot in the output of systemctl status?"  # ch03 (dev set dr-12)


def _stdio(home: Path) -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "citerag.cli", "mcp", "--index", str(home)],
                                        cwd=str(home)))


def _http(url: str, key: str | None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client(streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=120)))


def _run(client: Client, session: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with client:
            return await session(client)

    return anyio.run(main)


async def _tour(client: Client, collection: str) -> dict[str, Any]:
    """What an agent does: list the tools and collections, search, ask, and read around the answer's quote."""
    tools = {t.name for t in (await client.list_tools()).tools}
    listed = (await client.call_tool("list_collections", {})).structured_content
    found = (await client.call_tool("search", {"collection": collection, "query": QUESTION, "k": 3})).structured_content
    asked = (await client.call_tool("ask", {"collection": collection, "question": QUESTION})).structured_content
    first = found["results"][0]
    read = (await client.call_tool("read_document", {"collection": collection, "document_id": first["document_id"],
                                                     "start": first["start"], "end": first["end"]})).structured_content
    return {"tools": tools, "listed": listed, "found": found, "asked": asked, "read": read, "first": first}


def _check_tour(tour: dict[str, Any], collections: set[str]) -> None:
    assert tour["tools"] == TOOLS
    assert {c["name"] for c in tour["listed"]["collections"]} == collections
    results = tour["found"]["results"]
    assert 1 <= len(results) <= 3 and all(r["end"] - r["start"] == len(r["quote"]) for r in results)
    assert tour["read"]["text"] == tour["first"]["quote"]  # the range opens exactly the quote
    asked = tour["asked"]
    assert not asked["refused"] and asked["citations"] and "[1]" in asked["answer"]
    assert {m["index"] for m in asked["markers"]} <= {c["index"] for c in asked["citations"]}
    assert any("failed" in c["quote"] for c in asked["citations"]), asked  # the dev set's needle


def test_stdio_serves_the_four_tools_over_every_collection_of_the_home(deployment: Deployment) -> None:
    tour = _run(_stdio(deployment.server.home), lambda c: _tour(c, "default"))
    _check_tour(tour, {"default", "other"})


def test_http_answers_with_citations_for_a_key_and_shows_it_only_its_collection(deployment: Deployment) -> None:
    url = deployment.server.url
    _check_tour(_run(_http(url, deployment.reader_a), lambda c: _tour(c, "default")), {"default"})

    async def other_team(client: Client) -> list[Any]:
        return [await client.call_tool("list_collections", {}),
                await client.call_tool("search", {"collection": "default", "query": QUESTION}),
                await client.call_tool("read_document", {"collection": "default", "document_id": 1}),
                await client.call_tool("ask", {"collection": "nosuch", "question": QUESTION})]

    listed, search, read, ask = _run(_http(url, deployment.team_b), other_team)
    assert [c["name"] for c in listed.structured_content["collections"]] == ["other"]
    for result in (search, read):  # another team's collection is as absent as one that does not exist
        assert result.is_error and result.content[0].text.endswith("collection 'default' not found")
    assert ask.is_error and ask.content[0].text.endswith("collection 'nosuch' not found")


def test_http_without_a_valid_key_is_a_401_and_reaches_no_tool(deployment: Deployment) -> None:
    url = deployment.server.url
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer crk_00000000_notakey"}, {"Authorization": "Basic eDp5"}):
        response = httpx.post(f"{url}/mcp", json=body, headers={**headers, **auth}, timeout=30)
        assert response.status_code == 401, response.text
        assert response.json()["error"].startswith("a valid API key is required")
    with pytest.raises(Exception):  # noqa: B017 - the SDK's client raises its own transport error on a 401
        _run(_http(url, None), lambda c: c.list_tools())


def test_a_revoked_key_stops_at_its_next_call(deployment: Deployment) -> None:
    keys = deployment.server.service.keys
    key = keys.create("default", "read")

    async def calls(client: Client) -> tuple[Any, Any]:
        before = await client.call_tool("list_collections", {})
        keys.revoke(key[len("crk_"):].partition("_")[0])
        try:
            return before, await client.call_tool("list_collections", {})
        except Exception as exc:  # noqa: BLE001 - a refused request may surface as the transport's error
            return before, exc

    before, after = _run(_http(deployment.server.url, key), calls)
    assert [c["name"] for c in before.structured_content["collections"]] == ["default"]
    assert not hasattr(after, "structured_content") or after.is_error


def test_read_document_pages_and_refuses_bad_ranges(deployment: Deployment) -> None:
    doc = deployment.ids["ch03.en.html"]

    async def reads(client: Client) -> list[Any]:
        return [await client.call_tool("read_document", {"collection": "default", "document_id": doc}),
                await client.call_tool("read_document", {"collection": "default", "document_id": doc,
                                                         "start": 10, "end": 5}),
                await client.call_tool("read_document", {"collection": "default", "document_id": 999999})]

    page, backwards, missing = _run(_http(deployment.server.url, deployment.admin), reads)
    text = page.structured_content
    assert text["start"] == 0 and text["end"] == min(text["length"], 20_000) == len(text["text"])
    with httpx.Client(base_url=deployment.server.url, headers={"Authorization": f"Bearer {deployment.admin}"}) as c:
        whole = c.get(f"/v1/collections/default/documents/{doc}/text").text
    assert whole.startswith(text["text"])
    assert backwards.is_error and "start and end" in backwards.content[0].text
    assert missing.is_error and "document 999999 not found" in missing.content[0].text
