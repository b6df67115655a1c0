#!/usr/bin/env python3
"""Build the two cross-lingual dev sets from the English and German Debian Reference sets.

    python3 eval/make_cross_sets.py           # (re)write them
    python3 eval/make_cross_sets.py --check   # exit 1 if the committed files differ from what this writes

* debian-reference-de-en: the German questions (and German out-of-domain questions) over the English
  chapters, each scored against the English needle of the same truth (de-NN <-> dr-NN).
* debian-reference-en-de: the English questions (and English out-of-domain questions) over the German
  chapters, each scored against the German needle of the same truth.

Neither set carries a corpus: devset.json points at the other set's (`citerag eval --dev-set` reads it).
A trap keeps its mark only where its bait phrase is in the corpus it is asked over; the verifiers of the
two source sets check their own traps, and this script checks the carried ones.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EN, DE = HERE / "debian-reference", HERE / "debian-reference-de"


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def corpus_text(folder: Path) -> str:
    from lxml import html  # the same text the needle rules use: whitespace-collapsed body text

    parts = [html.parse(str(p)).getroot().text_content() for p in sorted((folder / "corpus").glob("*.html"))]
    return re.sub(r"\s+", " ", " ".join(parts))


def cross(questions: list[dict], needles: list[dict], prefix: str) -> list[dict]:
    """Each question of `questions` with the needle and source of the same truth number in `needles`."""
    by_number = {(q["truth"].split("-")[1], q["style"]): q for q in needles}
    out = []
    for q in questions:
        n = q["truth"].split("-")[1]
        target = by_number[(n, q["style"])]
        row = {"id": f"{prefix}-{n}-{q['style']}", "truth": f"{prefix}-{n}", "style": q["style"],
               "query": q["query"], "needle": target["needle"], "source": target["source"]}
        if "needle_lang" in target:
            row["needle_lang"] = target["needle_lang"]
        out.append(row)
    return out


def ood_over(ood: list[dict], text: str, baits: dict[str, str]) -> list[dict]:
    out = []
    for q in ood:
        row = {k: v for k, v in q.items() if k != "trap"}
        if q.get("trap") and baits.get(q["id"], "\0") in text:
            row["trap"] = True
        out.append(row)
    return out


def lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def build() -> dict[Path, str]:
    en_q, de_q = read(EN / "questions.jsonl"), read(DE / "questions.jsonl")
    en_ood, de_ood = read(EN / "ood.jsonl"), read(DE / "ood.jsonl")
    en_text, de_text = corpus_text(EN), corpus_text(DE)
    # A trap's bait: the quoted words in its question (what makes it look answerable).
    baits = {q["id"]: m.group(1) for q in en_ood + de_ood if (m := re.search(r"[\"'„“‚‘]([^\"'“”‘’]{8,})[\"'“”‘’]",
                                                                              q["query"]))}
    de_en, en_de = HERE / "debian-reference-de-en", HERE / "debian-reference-en-de"
    return {
        de_en / "questions.jsonl": lines(cross(de_q, en_q, "de-en")),
        de_en / "ood.jsonl": lines(ood_over(de_ood, en_text, baits)),
        de_en / "devset.json": json.dumps({"corpus": "../debian-reference/corpus", "exclude": ["*.pdf"]}) + "\n",
        en_de / "questions.jsonl": lines(cross(en_q, de_q, "en-de")),
        en_de / "ood.jsonl": lines(ood_over(en_ood, de_text, baits)),
        en_de / "devset.json": json.dumps({"corpus": "../debian-reference-de/corpus"}) + "\n",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args()
    files = build()
    if args.check:
        stale = [str(p.relative_to(HERE)) for p, text in files.items()
                 if not p.is_file() or p.read_text(encoding="utf-8") != text]
        print("FAIL: out of date: " + ", ".join(stale) if stale else "PASS: the cross-lingual sets are up to date")
        return 1 if stale else 0
    for path, text in files.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
