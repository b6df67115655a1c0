"""Measure the refusal rule per language (docs/refusal.md, "German"): on one index, the cut fitted from English or
German synthetic stems against the English or German bank, and each cut's outcome on out-of-domain and answerable
question files (JSONL with "query"), by dense best distance.

  PYTHONPATH=src python scripts/refusal_languages.py --model multilingual-e5-small --index /tmp/idx-e5 \
      --corpus eval/debian-reference-de/corpus --ood eval/debian-reference-de/ood.jsonl \
      --questions eval/debian-reference-de/questions.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from citerag.app.home import Citerag
from citerag.refusal.bank import load_bank
from citerag.refusal.calibrate import choose_cut
from citerag.refusal.synthetic import synthetic_questions
from citerag.settings import Settings


def _queries(paths: list[Path]) -> list[str]:
    return [json.loads(line)["query"] for p in paths for line in p.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, help="ingested first when the index does not exist")
    parser.add_argument("--ood", type=Path, nargs="*", default=[])
    parser.add_argument("--questions", type=Path, nargs="*", default=[])
    args = parser.parse_args()
    create = not args.index.exists()
    with Citerag.open(Settings(index_dir=args.index, embedding_model=args.model), create=create) as app:
        if create:
            app.ingest([args.corpus])
        collection = app.collection()
        rule = collection.refusal_rule()
        print(rule.describe() if rule else "no rule", rule.language_shares if rule else "")
        chunks, _ = collection.indexed_chunks()
        best = collection._best_distances
        synthetic = {code: best([q.query for q in synthetic_questions(chunks, 200, 13, code)]) for code in ("en", "de")}
        bank = {code: best([b.query for b in load_bank(code)]) for code in ("en", "de")}
        ood, answerable = best(_queries(args.ood)), best(_queries(args.questions))
        for stems, negatives in (("en", "en"), ("de", "de"), ("de", "en"), ("en", "de")):
            cut = choose_cut(synthetic[stems], bank[negatives])
            print(f"stems {stems} bank {negatives}: cut {cut:.3f}, synthetic refused "
                  f"{sum(d >= cut for d in synthetic[stems])}/{len(synthetic[stems])}, bank answered "
                  f"{sum(d < cut for d in bank[negatives])}/{len(bank[negatives])}; OOD answered "
                  f"{sum(d < cut for d in ood)}/{len(ood)}, answerable refused "
                  f"{sum(d >= cut for d in answerable)}/{len(answerable)}")


if __name__ == "__main__":
    main()
