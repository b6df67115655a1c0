"""Follow-up retrieval measured: the last turn of each conversation searched as one arm rewrites it.

Arms: "alone" (the last turn as asked), "folded" (the LLM-free rule, citerag.answer.followup.folded_query) and
"llm" (the condense prompt through the configured generator). Each earlier turn is searched first, rewritten by the
same arm, and the sections of its top hits become that turn's cited sections, as they would in a conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from citerag.answer.followup import PastTurn, folded_query
from citerag.app.collection import Collection
from citerag.app.models import SearchOptions
from citerag.eval.conversations import Conversation
from citerag.eval.metrics import summary
from citerag.eval.paired import paired, paired_rr
from citerag.eval.runner import DEPTH, QueryResult, query_result

# history, question -> the retrieval query
Rewrite = Callable[[Sequence[PastTurn], str], str]
CITED = 3  # hits of an earlier turn whose sections count as cited (the answer's usual sources)


@dataclass
class ArmResult:
    name: str
    queries: dict[str, str]  # conversation id -> the last turn's retrieval query
    results: dict[str, QueryResult]

    @property
    def ranks(self) -> dict[str, int | None]:
        return {cid: r.rank for cid, r in self.results.items()}


def run_arm(collection: Collection, conversations: Sequence[Conversation], name: str, rewrite: Rewrite,
            mode: str, bodies: dict[int, str]) -> ArmResult:
    options = SearchOptions(mode=mode, k=DEPTH, rerank_model="")
    queries: dict[str, str] = {}
    results: dict[str, QueryResult] = {}
    for conv in conversations:
        history: list[PastTurn] = []
        for turn in conv.turns[:-1]:
            query = rewrite(history, turn)
            hits = collection.search(query, options).hits[:CITED]
            sections = tuple(dict.fromkeys(h.chunk.section for h in hits if h.chunk.section))
            history.append(PastTurn(turn, query, sections))
        query = rewrite(history, conv.turns[-1])
        queries[conv.id] = query
        results[conv.id] = query_result(collection.search(query, options).hits, conv.last, bodies)
    return ArmResult(name, queries, results)


def arm_report(arm: ArmResult, against: ArmResult | None) -> dict[str, Any]:
    figures = {k: e.as_json() for k, e in summary(list(arm.ranks.values())).items()}
    out: dict[str, Any] = {"figures": figures, "queries": arm.queries,
                           "ranks": arm.ranks}
    if against is not None and against is not arm:
        out["paired_vs_" + against.name] = {"recall": [p.as_json() for p in paired(arm.ranks, against.ranks)],
                                            "reciprocal_rank": paired_rr(arm.ranks, against.ranks)}
    return out


def evaluate_followups(collection: Collection, conversations: Sequence[Conversation], *, mode: str,
                       bodies: dict[int, str], llm: Rewrite | None, llm_name: str | None,
                       log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Every arm over every conversation, with paired sign tests of each arm against the last turn alone (and the
    LLM's against the fold)."""
    arms = [run_arm(collection, conversations, "alone", lambda history, q: q, mode, bodies)]
    log(f"follow-ups: alone done ({len(conversations)} conversations)")
    arms.append(run_arm(collection, conversations, "folded", folded_query, mode, bodies))
    log("follow-ups: folded done")
    if llm is not None:
        arms.append(run_arm(collection, conversations, "llm", llm, mode, bodies))
        log("follow-ups: llm done")
    alone = arms[0]
    report: dict[str, Any] = {"n": len(conversations), "turns": sum(len(c.turns) for c in conversations),
                              "mode": mode, "llm": llm_name, "arms": {a.name: arm_report(a, alone) for a in arms}}
    if llm is not None:
        report["arms"]["llm"]["paired_vs_folded"] = arm_report(arms[2], arms[1])["paired_vs_folded"]
    return report


def _p(p: float) -> str:
    return " < 1e-6" if p < 1e-6 else f"={p:.2g}"  # the report rounds p to 6 decimals


def followups_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Follow-up retrieval: {report['name']}", "",
             f"{report['n']} conversations ({report['turns']} turns), configuration {report['configuration']}; "
             f"the LLM arm: {report['llm'] or 'not run (pass --generator llama or openai)'}.", "",
             "| arm | R@1 | R@4 | R@8 | R@20 | MRR | vs alone: RR wins/losses, p | R@8 wins/losses, p |",
             "|---|---|---|---|---|---|---|---|"]
    for name, arm in report["arms"].items():
        f = arm["figures"]
        cells = [f"{f[k]['value']:.3f}" for k in ("recall@1", "recall@4", "recall@8", "recall@20", "mrr")]
        pair = arm.get("paired_vs_alone")
        if pair:
            rr = pair["reciprocal_rank"]
            r8 = next(p for p in pair["recall"] if p["k"] == 8)
            cells += [f"{rr['wins']}/{rr['losses']}, p{_p(rr['p'])}", f"{r8['wins']}/{r8['losses']}, p{_p(r8['p'])}"]
        else:
            cells += ["", ""]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
