"""Conversations over HTTP on the real server, on both backends: a follow-up answered from the earlier turns (dev set
dr-c17), the turns kept with the query each was searched with, streamed turns, and each conversation seen by the key
that started it alone (probes as for collections); the OpenAI endpoint's follow-up, which stores nothing; and
conversations that outlive a restart and are deleted with their collection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from live import live_server, wait_settled
from service_fixtures import Deployment

from citerag.keystore.sqlite import SqliteKeyStore
from corpus_paths import DEV_CORPUS

# Dev set conversation dr-c17 (ch04), three turns; its needle answers only the last.
FIRST = "How can someone reset the root password if they have physical access to the disk?"
SECOND = "Is it even easier if they can edit the GRUB menu entry?"
FOLLOW_UP = "Is there any software measure that stops all of this?"
WHITE = "The only reasonable software solution to avoid all these concerns is to use software encrypted root partition"
BACKENDS = ["deployment", "pg_deployment"]


def _quotes(answer: dict[str, Any]) -> str:
    return " ".join(" ".join(c["quote"].split()) for c in answer["citations"])


def _deployment(request: pytest.FixtureRequest, name: str) -> Deployment:
    found: Deployment = request.getfixturevalue(name)
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_follow_up_is_searched_with_the_earlier_turn_and_kept(request: pytest.FixtureRequest, backend: str) -> None:
    d = _deployment(request, backend)
    with d.server.client(d.team_a) as c:
        alone = c.post("/v1/collections/default/ask", json={"question": FOLLOW_UP}).json()
        assert WHITE not in _quotes(alone)  # asked alone, the follow-up does not find its passage
        first = c.post("/v1/collections/default/conversations", json={"question": FIRST})
        assert first.status_code == 200, first.text
        cid = first.json()["conversation_id"]
        assert first.json()["turn"] == 1 and first.json()["query"] == FIRST
        middle = c.post(f"/v1/collections/default/conversations/{cid}", json={"question": SECOND}).json()
        assert middle["turn"] == 2 and FIRST in middle["query"]
        second = c.post(f"/v1/collections/default/conversations/{cid}", json={"question": FOLLOW_UP}).json()
        assert second["conversation_id"] == cid and second["turn"] == 3 and second["question"] == FOLLOW_UP
        # What was searched, shown: the previous question (the fold keeps one) and the follow-up.
        assert SECOND in second["query"] and FIRST not in second["query"] and second["query"].endswith(FOLLOW_UP)
        assert not second["refused"] and WHITE in _quotes(second), second
        listed = c.get("/v1/collections/default/conversations").json()["conversations"]
        assert [(x["id"], x["title"], x["turns"]) for x in listed if x["id"] == cid] == [(cid, FIRST, 3)]
        read = c.get(f"/v1/collections/default/conversations/{cid}").json()
        assert [(t["n"], t["question"], t["query"]) for t in read["turns"]] == \
            [(1, FIRST, FIRST), (2, SECOND, middle["query"]), (3, FOLLOW_UP, second["query"])]
        assert read["turns"][2]["citations"] == second["citations"] and read["turns"][2]["answer"] == second["answer"]
        assert all("source_path" not in x for t in read["turns"] for x in t["citations"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_another_key_never_sees_a_conversation(request: pytest.FixtureRequest, backend: str) -> None:
    d = _deployment(request, backend)
    with d.server.client(d.team_a) as c:
        cid = c.post("/v1/collections/default/conversations", json={"question": FIRST}).json()["conversation_id"]
    base = f"/v1/collections/default/conversations/{cid}"
    # The same collection's reader and the server admin are other keys: the conversation is not theirs.
    for key in (d.reader_a, d.admin):
        with d.server.client(key) as c:
            assert cid not in {x["id"] for x in c.get("/v1/collections/default/conversations").json()["conversations"]}
            for response in (c.get(base), c.post(base, json={"question": FOLLOW_UP}), c.delete(base),
                             c.post(base, json={"question": FOLLOW_UP, "stream": True})):
                assert response.status_code == 404, response.text
                assert response.json()["error"] == f"conversation {cid!r} not found"
    with d.server.client(d.team_b) as c:  # another team: the collection itself is not found
        assert c.get(base).status_code == 404 and c.get(base).json()["error"] == "collection 'default' not found"
    with d.server.client(d.team_a) as c:
        assert c.get(base).json()["turns"][0]["question"] == FIRST  # none of that wrote to it
        assert len(c.get(base).json()["turns"]) == 1
        bad = c.get("/v1/collections/default/conversations/..%2Fetc")
        assert bad.status_code in (404, 422)
        assert c.get("/v1/collections/default/conversations/" + "0" * 32).status_code == 404
        assert c.delete(base).status_code == 204
        assert c.get(base).status_code == 404 and c.delete(base).status_code == 404


def test_a_streamed_turn_says_its_conversation_and_query_first(deployment: Deployment) -> None:
    with deployment.server.client(deployment.team_a) as c:
        cid = c.post("/v1/collections/default/conversations", json={"question": SECOND}).json()["conversation_id"]
        with c.stream("POST", f"/v1/collections/default/conversations/{cid}",
                      json={"question": FOLLOW_UP, "stream": True}) as response:
            assert response.status_code == 200
            events = [(line.removeprefix("event: "), json.loads(data.removeprefix("data: ")))
                      for line, data in _pairs(response.iter_lines())]
        kinds = [k for k, _ in events]
        assert kinds[0] == "conversation" and kinds[-1] == "done" and "final" in kinds
        assert events[0][1]["id"] == cid and SECOND in events[0][1]["query"]
        final = dict(events)["final"]
        assert WHITE in _quotes(final)
        assert [t["n"] for t in c.get(f"/v1/collections/default/conversations/{cid}").json()["turns"]] == [1, 2]


def _pairs(lines: Any) -> list[tuple[str, str]]:
    out, event = [], ""
    for line in lines:
        if line.startswith("event: "):
            event = line
        elif line.startswith("data: ") and event:
            out.append((event, line))
            event = ""
    return out


def test_the_openai_endpoint_answers_a_follow_up_from_the_messages(deployment: Deployment) -> None:
    client = openai.OpenAI(base_url=f"{deployment.server.url}/v1", api_key=deployment.reader_a, max_retries=0,
                           timeout=120)
    with deployment.server.client(deployment.reader_a) as c:  # the page's tests may have kept some of this key's
        before = c.get("/v1/collections/default/conversations").json()["conversations"]
    first = client.chat.completions.create(model="default", messages=[{"role": "user", "content": SECOND}])
    reply = first.choices[0].message.content or ""
    assert "\n\nSources:\n" in reply
    follow = client.chat.completions.create(model="default", messages=[
        {"role": "user", "content": SECOND}, {"role": "assistant", "content": reply},
        {"role": "user", "content": FOLLOW_UP}])
    extra = follow.model_extra or {}
    assert SECOND in extra["query"] and not extra["refused"]
    assert any(WHITE in " ".join(c["quote"].split()) for c in extra["citations"]), extra
    with deployment.server.client(deployment.reader_a) as c:  # an OpenAI client keeps its own history
        assert c.get("/v1/collections/default/conversations").json()["conversations"] == before


def test_conversations_survive_a_restart_and_go_with_their_collection(tmp_path: Path) -> None:
    keys = SqliteKeyStore(tmp_path)
    admin = keys.create(None, "admin")
    chapter = DEV_CORPUS / "ch04.en.html"
    with live_server(tmp_path) as server, server.client(admin) as c:
        assert c.post("/v1/collections", json={"name": "talk"}).status_code == 201
        uploaded = c.post("/v1/collections/talk/documents", files=[("files", (chapter.name, chapter.read_bytes()))])
        wait_settled(c, "talk", [d["id"] for d in uploaded.json()["documents"]])
        cid = c.post("/v1/collections/talk/conversations", json={"question": SECOND}).json()["conversation_id"]
        answered = c.post(f"/v1/collections/talk/conversations/{cid}", json={"question": FOLLOW_UP}).json()
    with live_server(tmp_path) as server, server.client(admin) as c:  # a new process on the same home
        turns = c.get(f"/v1/collections/talk/conversations/{cid}").json()["turns"]
        assert [(t["question"], t["query"], t["answer"]) for t in turns][1] == \
            (FOLLOW_UP, answered["query"], answered["answer"])
        assert c.delete("/v1/collections/talk").status_code == 204
        assert c.post("/v1/collections", json={"name": "talk"}).status_code == 201  # the same name, a new collection
        assert c.get(f"/v1/collections/talk/conversations/{cid}").status_code == 404
        assert c.get("/v1/collections/talk/conversations").json()["conversations"] == []
    keys.close()
