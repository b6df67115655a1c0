"""A key is read from the Authorization header (or the page's session cookie) only: one put in a query string, a
form field or another header is not a key, on every method of every route of a collection (the route table's)."""

from __future__ import annotations

import httpx
import pytest
from service_fixtures import Deployment
from test_isolation import SOURCE, answer_trace, collection_routes, start_conversation

PLACES = ["key", "api_key", "access_token", "token", "authorization"]


@pytest.mark.parametrize("place", PLACES)
def test_a_key_in_the_query_string_is_not_a_key(deployment: Deployment, place: str) -> None:
    routes = collection_routes(deployment)
    talk = start_conversation(deployment, deployment.team_a)  # the key's own conversation: still a 401 without it
    answered = answer_trace(deployment, deployment.team_a)
    with httpx.Client(base_url=deployment.server.url, timeout=20) as anon:
        for method, path, _ in routes:
            url = path.format(name="default", document_id=next(iter(deployment.ids.values())), conversation_id=talk,
                              trace_id=answered, source=SOURCE)
            response = anon.request(method, url, params={place: deployment.team_a})
            assert response.status_code == 401, (method, url, response.status_code, response.text[:200])
            assert response.json()["field"] is None


@pytest.mark.parametrize("header", ["X-Api-Key", "Api-Key", "X-Auth-Token", "Token"])
def test_a_key_in_another_header_is_not_a_key(deployment: Deployment, header: str) -> None:
    with httpx.Client(base_url=deployment.server.url, timeout=20, headers={header: deployment.team_a}) as c:
        assert c.get("/v1/collections/default/documents").status_code == 401
        assert c.post("/v1/collections/default/search", json={"query": "systemctl"}).status_code == 401
