"""The OpenAI-compatible endpoints through the official `openai` client against the real server: models per key,
cited answers whole and streamed, refusals as ordinary messages, another team's collection not found."""

from __future__ import annotations

import httpx
import openai
import pytest
from service_fixtures import Deployment

RED_DOT = "What unit state is signalled by a red dot in the output of systemctl status?"  # dev set dr-12, ch03
OFF_TOPIC = "How do I bake sourdough bread?"


def _client(deployment: Deployment, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{deployment.server.url}/v1", api_key=key, max_retries=0, timeout=120)


def test_models_are_the_collections_a_key_may_read(deployment: Deployment) -> None:
    assert [m.id for m in _client(deployment, deployment.reader_a).models.list()] == ["default"]
    assert sorted(m.id for m in _client(deployment, deployment.admin).models.list()) == ["default", "other"]


def test_a_completion_keeps_its_markers_and_lists_sources_that_open_at_the_quote(deployment: Deployment) -> None:
    client = _client(deployment, deployment.reader_a)
    completion = client.chat.completions.create(
        model="default", messages=[{"role": "system", "content": "Answer briefly."},
                                   {"role": "user", "content": RED_DOT}])
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    content = choice.message.content or ""
    citations = (completion.model_extra or {})["citations"]
    assert "[1]" in content and citations and not (completion.model_extra or {})["refused"]
    assert any("failed" in c["quote"] for c in citations)  # the dev set's needle
    answer, _, sources = content.partition("\n\nSources:\n")
    assert sources.count("\n") + 1 == len(citations)
    first = citations[0]
    link = f"{deployment.server.url}{first['href']}"
    assert f"[1] [{first['document_name']}" in sources and f"({link})" in sources
    with httpx.Client(headers={"Authorization": f"Bearer {deployment.reader_a}"}, timeout=60) as web:
        assert web.get(link).status_code == 200
        text = web.get(f"{deployment.server.url}/v1/collections/default/documents/{first['document_id']}/text").text
    assert text[first["start"]:first["end"]] == first["quote"]

    # The same question streamed: the same text, and the citations on the last chunk.
    chunks = list(client.chat.completions.create(model="default", messages=[{"role": "user", "content": RED_DOT}],
                                                 stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == content
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[-1].model_extra or {})["citations"] == citations


def test_a_refusal_is_an_ordinary_assistant_message(deployment: Deployment) -> None:
    client = _client(deployment, deployment.reader_a)
    completion = client.chat.completions.create(model="default", messages=[{"role": "user", "content": OFF_TOPIC}])
    extra = completion.model_extra or {}
    assert extra["refused"] is True and extra["citations"] == []
    assert completion.choices[0].message.content and "Sources:" not in completion.choices[0].message.content
    streamed = list(client.chat.completions.create(model="default", stream=True,
                                                   messages=[{"role": "user", "content": OFF_TOPIC}]))
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == completion.choices[0].message.content


def test_another_teams_collection_is_not_found_and_bad_requests_name_their_field(deployment: Deployment) -> None:
    with pytest.raises(openai.NotFoundError):
        _client(deployment, deployment.team_b).chat.completions.create(
            model="default", messages=[{"role": "user", "content": RED_DOT}])
    client = _client(deployment, deployment.reader_a)
    with pytest.raises(openai.UnprocessableEntityError) as last_not_user:
        client.chat.completions.create(model="default", messages=[{"role": "user", "content": RED_DOT},
                                                                  {"role": "assistant", "content": "Red."}])
    assert last_not_user.value.response.json()["field"] == "messages"
    with pytest.raises(openai.AuthenticationError):
        _client(deployment, "crk_00000000_notakey").models.list()
