"""The production loop end to end on a real server: questions asked over HTTP (their text kept), feedback naming the
right source, the sampled answers labelled over the API and at the terminal (`citerag label`), exported as a dev set
(`citerag label export`), evaluated with `citerag eval --dev-set` and gated against that first run.

The questions are debian-reference's dr-15, dr-16 and dr-17 (chapter 4) with their needles, and an out-of-domain
one; a person would choose the same spans."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from live import live_server, wait_settled

from citerag.cli import cli
from citerag.service.state import ServiceConfig
from corpus_paths import DEV_CORPUS

ASKED = {  # question -> needle (eval/debian-reference/questions.jsonl)
    "What is sudo(8) intended for in system administration?":
        "is a program designed to allow a sysadmin to give limited root privileges to users and log root activity.",
    "What procedure regains root access when the root password is lost but the machine's disk can be reached "
    "physically?": "With physical access to hard disk, resetting the password is relatively easy with following steps.",
    "Which control group hierarchy does Debian use starting with Debian 11?":
        "As of Debian 11 Bullseye (2021), Debian uses unified cgroup hierarchy",
}
OUT_OF_DOMAIN = "Which spices go into a traditional Sichuan hot pot broth?"
BASE = "/v1/collections/default"


def span_of(text: str, needle: str) -> tuple[int, int]:
    """The needle in the document's text, whatever its spacing there (as a person selects it)."""
    pattern = r"\s+".join(re.escape(w) for w in needle.split())
    found = re.search(pattern, text)
    assert found, needle
    return found.start(), found.end()


def candidates(c: httpx.Client) -> list[dict[str, Any]]:
    response = c.get(f"{BASE}/labels/candidates", params={"n": 10})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["candidates"]
    return found


def test_asked_labelled_exported_evaluated_and_gated(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with live_server(home, ServiceConfig(keys_required=False), trace_text=True) as live, live.client() as c:
        files = [("files", (name, (DEV_CORPUS / name).read_bytes())) for name in ("ch03.en.html", "ch04.en.html")]
        uploaded = c.post(f"{BASE}/documents", files=files).json()["documents"]
        wait_settled(c, "default", [d["id"] for d in uploaded], timeout=240)
        doc_id = next(d["id"] for d in uploaded if d["name"] == "ch04.en.html")
        text = c.get(f"{BASE}/documents/{doc_id}/text").text
        traces = {q: c.post(f"{BASE}/ask", json={"question": q}).json()["trace_id"] for q in [*ASKED, OUT_OF_DOMAIN]}
        c.post(f"{BASE}/ask", json={"question": "  " + OUT_OF_DOMAIN.upper()})  # the same words again: one candidate

        # Feedback on the first answer names the cited source that holds its needle.
        first, needle = next(iter(ASKED.items()))
        answer = c.get(f"/v1/traces/{traces[first]}").json()
        cited = c.post(f"{BASE}/ask", json={"question": first}).json()["citations"]  # the same answer, from the cache
        right = next(x["index"] for x in cited if needle in " ".join(x["quote"].split()))
        assert answer["question"] == first
        assert c.post(f"{BASE}/answers/{traces[first]}/feedback", json={"helpful": True, "source": right}).status_code \
            == 200

        found = candidates(c)
        assert sorted(" ".join(x["question"].split()).casefold() for x in found) == \
            sorted(q.casefold() for q in [*ASKED, OUT_OF_DOMAIN])
        assert [x["asked_at"] for x in found] == sorted(x["asked_at"] for x in found)  # oldest first
        named = next(x for x in found if x["trace_id"] == traces[first])
        suggested = named["passages"][named["suggested"]]
        assert suggested["cited"] == right and needle in " ".join(suggested["text"].split())
        assert suggested["text"] == text[suggested["start"]:suggested["end"]]  # offsets into the document's text

        # Over the API: the first question's needle and the out-of-domain one.
        start, end = span_of(text, needle)
        kept = c.post(f"{BASE}/labels", json={"trace_id": traces[first], "document_id": doc_id, "start": start,
                                              "end": end})
        assert kept.status_code == 200, kept.text
        assert kept.json()["needle"] == text[start:end] and kept.json()["kind"] == "needle"
        assert c.post(f"{BASE}/labels", json={"trace_id": traces[OUT_OF_DOMAIN], "ood": True}).status_code == 200
        bad = c.post(f"{BASE}/labels", json={"trace_id": traces[first], "document_id": doc_id, "start": 5, "end": 2})
        assert bad.status_code == 422 and bad.json()["field"] == "start"
        assert c.post(f"{BASE}/labels", json={"trace_id": "0" * 32, "ood": True}).status_code == 404
        left = candidates(c)
        assert {x["question"] for x in left} == set(list(ASKED)[1:])  # the other asking of OUT_OF_DOMAIN went too

    # At the terminal: the passage holding each needle, then its words (as pasted: spacing of one's own).
    typed = []
    for x in left:
        wanted = ASKED[x["question"]]
        n = next(i for i, p in enumerate(x["passages"], 1) if wanted in " ".join(p["text"].split()))
        typed += [str(n), "  ".join(wanted.split())]
    runner = CliRunner()
    labelled = runner.invoke(cli, ["label", "--index", str(home), "--sample", "5"], input="\n".join(typed) + "\n")
    assert labelled.exit_code == 0, labelled.output
    assert "2 labelled; 4 in all" in labelled.output
    again = runner.invoke(cli, ["label", "--index", str(home)])
    assert again.exit_code != 0 and "no answers to label" in str(again.exception)

    out = tmp_path / "production-set"
    exported = runner.invoke(cli, ["label", "export", "--index", str(home), "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    assert "2 documents, 3 questions, 1 out of domain" in exported.output
    assert sorted(p.name for p in (out / "corpus").iterdir()) == ["ch03.en.html", "ch04.en.html"]
    rows = [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines()]
    assert {r["query"]: " ".join(r["needle"].split()) for r in rows} == ASKED
    assert {r["source"] for r in rows} == {"ch04.en.html"}
    assert [json.loads(line)["query"] for line in (out / "ood.jsonl").read_text().splitlines()] == [OUT_OF_DOMAIN]
    assert runner.invoke(cli, ["label", "export", "--index", str(home), "--out", str(out)]).exit_code != 0

    # The exported set is a dev set like any other: evaluated, then gated against that run.
    first_run = runner.invoke(cli, ["eval", "--dev-set", str(out), "--strategies", "E", "--retrievers", "adaptive",
                                    "--out", str(tmp_path / "run1"), "--no-html"])
    assert first_run.exit_code == 0, first_run.output
    report = json.loads((tmp_path / "run1" / "report.json").read_text())
    assert (report["ground_truth"]["questions"], report["ground_truth"]["ood"]) == (3, 1)
    gated = runner.invoke(cli, ["eval", "--dev-set", str(out), "--strategies", "E", "--retrievers", "adaptive",
                                "--out", str(tmp_path / "run2"), "--no-html",
                                "--baseline", str(tmp_path / "run1" / "report.json"), "--gate"])
    assert gated.exit_code == 0, gated.output
    assert "gate: no significant regression" in gated.output
