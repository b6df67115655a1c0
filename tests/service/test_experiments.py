"""An experiment on a real server: started at the command line, 300 conversations split between two arms within the
configured share (sticky per conversation: every turn of one keeps its arm), the arm in each answer, the trace and
/metrics, feedback counted per arm, `citerag experiment report` per arm, one arm's traffic replayed through the other,
and the experiment stopped."""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner
from live import live_server, wait_settled
from prometheus_client.parser import text_string_to_metric_families

from citerag.cli import cli
from citerag.service.state import ServiceConfig
from corpus_paths import DEV_CORPUS

BASE = "/v1/collections/default"
QUESTIONS = ["What is sudo(8) intended for in system administration?",
             "Which control group hierarchy does Debian use starting with Debian 11?",
             "Which spices go into a traditional Sichuan hot pot broth?"]
CONVERSATIONS = 300
SPLIT = 0.3


def scrape(text: str, name: str) -> dict[tuple[str, ...], float]:
    found: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                found[tuple(f"{k}={v}" for k, v in sorted(s.labels.items()))] = s.value
    return found


def test_two_arms_split_the_traffic_and_report_per_arm(tmp_path: Path) -> None:
    home, runner = tmp_path / "home", CliRunner()
    with live_server(home, ServiceConfig(keys_required=False), trace_text=True) as live, live.client() as c:
        uploaded = c.post(f"{BASE}/documents", files=[("files", ("ch04.en.html",
                                                                 (DEV_CORPUS / "ch04.en.html").read_bytes()))])
        wait_settled(c, "default", [d["id"] for d in uploaded.json()["documents"]], timeout=240)
        assert "arm" not in c.post(f"{BASE}/ask", json={"question": QUESTIONS[0]}).json()  # no experiment yet
        started = runner.invoke(cli, ["experiment", "start", "bm25-strict", "--b", "mode=bm25", "--b", "k=5",
                                      "--split", str(SPLIT), "--sticky", "conversation", "--index", str(home)])
        assert started.exit_code == 0, started.output
        bad = runner.invoke(cli, ["experiment", "start", "other", "--b", "mode=bm25", "--index", str(home)])
        assert bad.exit_code != 0 and "is running: stop it first" in str(bad.exception)
        wrong = runner.invoke(cli, ["experiment", "start", "x", "--b", "mood=bm25", "--index", str(home)])
        assert wrong.exit_code != 0 and "unknown option 'mood'" in str(wrong.exception)

        arms: dict[str, list[dict[str, object]]] = {"a": [], "b": []}
        for i in range(CONVERSATIONS):
            answer = c.post(f"{BASE}/conversations", json={"question": QUESTIONS[i % 3]}).json()
            assert answer["experiment"] == "bm25-strict", answer
            arms[str(answer["arm"])].append(answer)
        share = len(arms["b"]) / CONVERSATIONS
        sd = math.sqrt(SPLIT * (1 - SPLIT) / CONVERSATIONS)
        assert abs(share - SPLIT) < 4.5 * sd, share  # a binomial share: out of these bounds about once in 10^5
        # Sticky: a conversation's next turn keeps its arm; the arm's options are what was used.
        for arm, answers in arms.items():
            for first in answers[:3]:
                then = c.post(f"{BASE}/conversations/{first['conversation_id']}",
                              json={"question": "And who may use it?"}).json()
                assert then["arm"] == arm
                record = c.get(f"/v1/traces/{then['trace_id']}").json()
                root = next(s for s in record["spans"] if s["name"] == "citerag.ask")["attributes"]
                assert (root["citerag.experiment"], root["citerag.arm"]) == ("bm25-strict", arm)
                assert root["citerag.options.mode"] == ("bm25" if arm == "b" else "adaptive")
        # Feedback: every arm-a answer of the first question helpful, arm b's not.
        rated = {"a": 0, "b": 0}
        for arm, answers in arms.items():
            for answer in answers:
                if answer["question"] == QUESTIONS[0]:
                    given = c.post(f"{BASE}/answers/{answer['trace_id']}/feedback", json={"helpful": arm == "a"})
                    assert given.status_code == 200 and given.json()["arm"] == arm
                    rated[arm] += 1
        metrics = c.get("/metrics").text
    answered = scrape(metrics, "citerag_experiment_answers_total")
    for arm in ("a", "b"):
        counted = sum(v for labels, v in answered.items() if f"arm={arm}" in labels)
        assert counted == len(arms[arm]) + 3, (arm, answered)
    feedback = scrape(metrics, "citerag_feedback_total")
    assert feedback[("arm=a", "verdict=helpful")] == rated["a"]
    assert feedback[("arm=b", "verdict=unhelpful")] == rated["b"]
    assert scrape(metrics, "citerag_experiment_answer_duration_seconds_count")

    shown = runner.invoke(cli, ["experiment", "report", "--index", str(home), "--json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    for arm in ("a", "b"):
        figures = report["arms"][arm]
        assert figures["requests"] == len(arms[arm]) + 3
        assert (figures["helpful"]["k"], figures["helpful"]["n"]) == ((rated[arm], rated[arm]) if arm == "a"
                                                                      else (0, rated[arm]))
        assert figures["latency"]["p50_ms"] > 0 and figures["tokens_reported"] == 0  # the extractive generator
    assert report["arms"]["b"]["options"] == {"mode": "bm25", "k": 5}
    assert report["tests"]["helpful"]["p"] < 1e-6  # all helpful against none
    text = runner.invoke(cli, ["experiment", "report", "--index", str(home)]).output
    assert "arm b {'mode': 'bm25', 'k': 5}" in text and "Fisher's exact test" in text

    replayed = runner.invoke(cli, ["experiment", "replay", "--from", "b", "--index", str(home), "--json"])
    assert replayed.exit_code == 0, replayed.output
    again = json.loads(replayed.output)
    assert again["asked"] == len(arms["b"]) + 3 and again["through"] == "a"
    stopped = runner.invoke(cli, ["experiment", "stop", "--index", str(home)])
    assert "stopped bm25-strict" in stopped.output
    listed = runner.invoke(cli, ["experiment", "list", "--index", str(home)]).output
    assert listed.startswith("bm25-strict  stopped ")
