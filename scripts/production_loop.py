"""The production loop of issue 28 run once, end to end, on a dev set, as docs/production-loop.md reports it.

A real `citerag serve` on loopback over the dev set's corpus (its questions' text kept) is asked every question and
out-of-domain query of the set. Its users are simulated from the dev set's own ground truth, and said to be: an
answer whose cited quotes hold the question's needle gets "helpful" and that source, any other "not helpful". The
sampled answers are then labelled over the API (the needle's span in its document, as a person would select it;
out of domain for the out-of-domain queries), exported with `citerag label export`, evaluated with `citerag eval
--dev-set` and gated against that first run. Then an experiment (arm b: hybrid retrieval, half the conversations)
runs the same questions again, with the same simulated feedback, and `citerag experiment report` compares the arms.
With --judge URL (an OpenAI-compatible endpoint), the exported set's answers are also judged.

    .venv/bin/python scripts/production_loop.py --dev-set eval/debian-reference --work /tmp/loop \\
        [--judge http://127.0.0.1:8080/v1 --judge-model smollm2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from citerag.config_file import set_in_config_file

CLI = [sys.executable, "-m", "citerag.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(*args: str | Path) -> str:
    done = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"citerag {' '.join(map(str, args))} failed:\n{done.stderr}")
    return done.stdout


def span_of(text: str, needle: str) -> tuple[int, int] | None:
    found = re.search(r"\s+".join(re.escape(w) for w in needle.split()), text)
    return (found.start(), found.end()) if found else None


def holds(answer: dict[str, Any], needle: str) -> int | None:
    """The [n] of the first cited quote holding the needle (whitespace collapsed), if any."""
    wanted = " ".join(needle.split())
    return next((c["index"] for c in answer.get("citations", []) if wanted in " ".join(c["quote"].split())), None)


def feedback(c: httpx.Client, answer: dict[str, Any], needle: str | None) -> None:
    source = holds(answer, needle) if needle else None
    body = {"helpful": source is not None, **({"source": source} if source else {})}
    c.post(f"/v1/collections/default/answers/{answer['trace_id']}/feedback", json=body).raise_for_status()


@contextmanager
def serving(home: Path) -> Iterator[httpx.Client]:
    """`citerag serve` on a free loopback port for the block, and a client of it."""
    port = free_port()
    server = subprocess.Popen([*CLI, "serve", "--index", str(home), "--no-keys", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as c:
            for _ in range(600):
                try:
                    if c.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
            yield c
    finally:
        server.terminate()
        server.wait(30)


def label_all(c: httpx.Client, questions: list[dict[str, Any]], ood: list[dict[str, Any]]) -> dict[str, int]:
    """Every sampled answer labelled over the API, as a person holding the ground truth would."""
    truth = {q["query"]: q for q in questions}
    outside = {o["query"] for o in ood}
    documents = {d["name"]: d["id"] for d in c.get("/v1/collections/default/documents").json()["documents"]}
    texts: dict[str, str] = {}
    candidates = c.get("/v1/collections/default/labels/candidates", params={"n": 200}).json()["candidates"]
    labelled = suggested = 0
    for cand in candidates:
        if cand["question"] in outside:
            body: dict[str, Any] = {"trace_id": cand["trace_id"], "ood": True}
        elif (q := truth.get(cand["question"])) is not None and q["source"] in documents:
            doc = documents[q["source"]]
            if q["source"] not in texts:
                texts[q["source"]] = c.get(f"/v1/collections/default/documents/{doc}/text").text
            span = span_of(texts[q["source"]], q["needle"])
            if span is None:
                continue
            body = {"trace_id": cand["trace_id"], "document_id": doc, "start": span[0], "end": span[1]}
            suggested += cand["suggested"] is not None
        else:
            continue
        c.post("/v1/collections/default/labels", json=body).raise_for_status()
        labelled += 1
    return {"candidates": len(candidates), "labelled": labelled, "prefilled_by_feedback": suggested}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev-set", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--judge", default=None)
    parser.add_argument("--judge-model", default="")
    args = parser.parse_args()
    if args.work.exists():
        shutil.rmtree(args.work)
    home = args.work / "home"
    questions = [json.loads(line) for line in (args.dev_set / "questions.jsonl").read_text().splitlines()]
    ood = [json.loads(line) for line in (args.dev_set / "ood.jsonl").read_text().splitlines()]
    manifest = json.loads((args.dev_set / "devset.json").read_text()) if (args.dev_set / "devset.json").exists() \
        else {}
    files = [p for p in sorted((args.dev_set / "corpus").iterdir())
             if not any(p.match(g) for g in manifest.get("exclude", []))]
    started = time.perf_counter()
    run("ingest", "--index", home, *files)
    set_in_config_file(home, "trace_text", True)  # questions kept with their traces: what labelling needs
    figures: dict[str, Any] = {"dev_set": str(args.dev_set), "questions": len(questions), "ood": len(ood)}
    with serving(home) as c:
        # Production traffic, and what its users said.
        asked = [(c.post("/v1/collections/default/ask", json={"question": q["query"]}).json(), q["needle"])
                 for q in questions] + \
                [(c.post("/v1/collections/default/ask", json={"question": o["query"]}).json(), None) for o in ood]
        for answer, needle in asked:
            feedback(c, answer, needle)
        figures["helpful"] = sum(holds(a, n) is not None for a, n in asked if n)
        figures.update(label_all(c, questions, ood))
    # An experiment on a server started afresh (no arm finds the other phase's answers in its caches): arm b
    # retrieves with hybrid search, half the conversations.
    run("experiment", "start", "hybrid", "--b", "mode=hybrid", "--split", "0.5", "--sticky", "conversation",
        "--index", home)
    with serving(home) as c:
        for q in [*questions, *({"query": o["query"], "needle": None} for o in ood)]:
            answer = c.post("/v1/collections/default/conversations", json={"question": q["query"]}).json()
            feedback(c, answer, q["needle"])
        figures["metrics"] = [line for line in c.get("/metrics").text.splitlines()
                              if line.startswith(("citerag_experiment_answers_total", "citerag_feedback_total"))]
    run("experiment", "stop", "--index", home)
    figures["experiment_report"] = run("experiment", "report", "--index", home).splitlines()
    export = args.work / "production-set"
    figures["export"] = run("label", "export", "--index", home, "--out", export).splitlines()
    first = run("eval", "--dev-set", export, "--strategies", "E", "--retrievers", "adaptive", "--no-html",
                "--out", args.work / "eval-1", "--generate",
                *(("--judge", args.judge, "--judge-model", args.judge_model) if args.judge else ()))
    figures["eval"] = first.splitlines()
    gated = run("eval", "--dev-set", export, "--strategies", "E", "--retrievers", "adaptive", "--no-html",
                "--out", args.work / "eval-2", "--baseline", args.work / "eval-1" / "report.json", "--gate")
    figures["gate"] = gated.splitlines()[-2:]
    figures["seconds"] = round(time.perf_counter() - started)
    (args.work / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
