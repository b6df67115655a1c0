"""The OpenAI-compatible client against real HTTP servers on loopback (stdlib, scripted): retries with
backoff on 5xx/429 and connection errors, none on other 4xx, timeouts, and server-sent-event streaming.
The same client against llama-cpp-python's real server is in test_llm_server.py."""

from __future__ import annotations

import time

import pytest

from citerag.answer.generators import GeneratorError, make_generator
from citerag.answer.generators.openai_compat import OpenAICompatGenerator, retryable
from citerag.settings import Settings, SettingsError
from http_servers import Reply, ScriptedServer, free_port


def _client(url: str, **kw) -> OpenAICompatGenerator:  # type: ignore[no-untyped-def]
    kw.setdefault("backoff", 0.01)
    kw.setdefault("timeout", 5.0)
    return OpenAICompatGenerator(url, "test-model", **kw)


def test_plain_completion_sends_the_prompt_greedily() -> None:
    with ScriptedServer([Reply(content=" Install it with apt [1]. ")]) as server:
        client = _client(server.base_url, api_key="sk-local")
        assert client.generate("q", [], "PROMPT") == "Install it with apt [1]."
        assert client.attempts == 1
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["authorization"] == "Bearer sk-local"
    body = req["body"]
    assert body["model"] == "test-model" and body["temperature"] == 0.0 and body["stream"] is False
    assert body["messages"][-1] == {"role": "user", "content": "PROMPT"}


def test_5xx_then_success_is_retried_with_backoff() -> None:
    with ScriptedServer([Reply(500, "boom"), Reply(503, "busy"), Reply(content="ok [1]")]) as server:
        client = _client(server.base_url, backoff=0.05)
        t0 = time.perf_counter()
        assert client.generate("q", [], "p") == "ok [1]"
        assert client.attempts == 3 and len(server.requests) == 3
        assert time.perf_counter() - t0 >= 0.05 + 0.10  # 0.05 x 2^0, then 0.05 x 2^1


def test_429_honours_retry_after() -> None:
    with ScriptedServer([Reply(429, "slow down", headers={"Retry-After": "0.2"}), Reply(content="fine [1]")]) as s:
        client = _client(s.base_url)
        t0 = time.perf_counter()
        assert client.generate("q", [], "p") == "fine [1]"
        assert client.attempts == 2 and time.perf_counter() - t0 >= 0.2


def test_other_4xx_fail_at_once() -> None:
    with ScriptedServer([Reply(400, "context length exceeded"), Reply(content="never sent")]) as server:
        client = _client(server.base_url)
        with pytest.raises(GeneratorError, match=r"HTTP 400: context length exceeded"):
            client.generate("q", [], "p")
        assert client.attempts == 1 and len(server.requests) == 1
    assert not retryable(404) and retryable(429) and retryable(502)


def test_persistent_5xx_gives_up_after_the_retries() -> None:
    with ScriptedServer([Reply(502, "bad gateway")] * 5) as server:
        client = _client(server.base_url, retries=2)
        with pytest.raises(GeneratorError, match=r"failed after 3 attempt\(s\): HTTP 502: bad gateway"):
            client.generate("q", [], "p")
        assert len(server.requests) == 3


def test_connection_refused_is_retried_then_reported() -> None:
    port = free_port()  # nothing listens there
    client = _client(f"http://127.0.0.1:{port}/v1", retries=2)
    with pytest.raises(GeneratorError, match=r"failed after 3 attempt\(s\): ConnectError"):
        client.generate("q", [], "p")
    assert client.attempts == 3


def test_a_slow_server_times_out_without_retrying() -> None:
    with ScriptedServer([Reply(content="late", delay=2.0), Reply(content="late again", delay=2.0)]) as server:
        client = _client(server.base_url, timeout=0.3)
        t0 = time.perf_counter()
        with pytest.raises(GeneratorError, match=r"did not answer within 0.3s"):
            client.generate("q", [], "p")
        assert time.perf_counter() - t0 < 1.5 and client.attempts == 1


def test_streaming_reads_server_sent_events() -> None:
    pieces = ["Use ", "apt", " [1", "]."]
    with ScriptedServer([Reply(stream=pieces), Reply(stream=pieces)]) as server:
        seen: list[str] = []
        client = _client(server.base_url, stream=True, on_delta=seen.append)
        assert client.generate("q", [], "p") == "Use apt [1]."
        assert seen == pieces and server.requests[0]["body"]["stream"] is True
        assert list(client.stream_text("p")) == pieces


def test_garbage_reply_is_an_error() -> None:
    with ScriptedServer([Reply(raw=b"<html>not json</html>")]) as server, \
            pytest.raises(GeneratorError, match="unexpected reply"):
        _client(server.base_url).generate("q", [], "p")


def test_factory_builds_the_configured_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "secret")
    with ScriptedServer([Reply(content="x [1]")]) as server:
        cfg = Settings(generator="openai", openai_base_url=server.base_url, openai_model="m",
                     openai_api_key_env="MY_KEY", generator_timeout=3.0)
        gen = make_generator(cfg, lambda: pytest.fail("the openai generator needs no encoder"))
        assert gen.name == "openai" and gen.generate("q", [], "p") == "x [1]"
        assert server.requests[0]["authorization"] == "Bearer secret"
    with pytest.raises(SettingsError, match="generator = 'gpt': expected one of extractive, llama, openai"):
        Settings().with_changes(generator="gpt")
