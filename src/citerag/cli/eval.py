"""`citerag eval`: index the corpus per strategy and embedder, run every query, write the reports,
and optionally gate against a baseline report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.app.models import AskOptions
from citerag.cli.options import generator_options
from citerag.errors import CiteragError
from citerag.eval.devset import dev_set
from citerag.settings import DEFAULT_ENCODER, MODES, Settings

ALL_STRATEGIES = "A,B,C,D,E,F"


def _load_report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CiteragError(f"no such baseline report: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CiteragError(f"cannot read baseline report {path}: {exc}") from exc
    if not isinstance(data, dict) or "configurations" not in data:
        raise CiteragError(f"{path} is not a citerag eval report")
    return data


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CiteragError(f"cannot write {path}: {exc.strerror}") from exc


def _generate_hook(qs: list[Any], oods: list[Any], options: AskOptions, judge: Any) -> Any:
    """What run_eval calls with the default configuration's collection: the answer-level figures."""
    from citerag.eval.answers import evaluate_answers

    def hook(collection: Collection) -> dict[str, Any]:
        return evaluate_answers(collection, qs, oods, options, judge=judge, log=lambda s: click.echo(s, err=True))

    return hook


def _judge(app: Citerag, url: str, model: str, key_env: str, timeout: float | None) -> Any:
    """The judge: the endpoint's model through citerag's OpenAI-compatible generator (its retries and timeout),
    greedy, with room for the JSON verdict."""
    from citerag.eval.judge import JudgeModel

    settings = Settings().with_changes(generator="openai", openai_base_url=url, openai_model=model,
                                       openai_api_key_env=key_env, generator_timeout=timeout, llm_temperature=0.0,
                                       llm_max_tokens=96)
    return JudgeModel(app.generator(settings).complete, model or "(the endpoint's default model)", url)


@click.command("eval")
@click.option("--dev-set", "dev_set_dir", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="A dev-set folder (corpus/, questions.jsonl, ood.jsonl, phrases.jsonl, devset.json): sets "
              "--corpus, --questions, --ood, --phrases and --exclude.")
@click.option("--corpus", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder of documents to index.")
@click.option("--questions", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="questions.jsonl: id, truth, style, query, needle, source.")
@click.option("--ood", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="ood.jsonl: out-of-domain queries (id, kind, query) for threshold calibration.")
@click.option("--phrases", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="phrases.jsonl: exact-words queries (text pasted from the corpus), scored apart.")
@click.option("--strategies", default=ALL_STRATEGIES, show_default=True, help="Chunking strategies, comma-separated.")
@click.option("--retrievers", default=",".join(MODES), show_default=True, help=", ".join(MODES) + ".")
@click.option("--embedders", default=DEFAULT_ENCODER, show_default=True,
              help="Embedding models, comma-separated (minilm+use, all-MiniLM-L6-v2, use-multilingual-v3, "
              "multilingual-e5-small, minilm+e5+use).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=True, file_okay=False), default=Path("eval-report"),
              show_default=True, help="Where report.json, report.md and report.html go.")
@click.option("--cache", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Index cache (default OUT/indexes); unchanged indexes are reused.")
@click.option("--cost-ratio", type=click.FloatRange(min=0, min_open=True), default=3.0, show_default=True,
              help="Cost of a bluff relative to a refusal, for the recommended threshold.")
@click.option("--threshold", type=float, default=None,
              help="Threshold to report the gate at besides the recommended one (default: the configured 0.675).")
@click.option("--baseline", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="An earlier report.json to compare with, query by query.")
@click.option("--gate", is_flag=True, help="Exit non-zero on a significant paired loss (Recall@k, or budget@2000 "
              "when both reports have it) or a newly destroyed answer against --baseline.")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Leave out corpus files whose name or relative path matches (repeatable), e.g. '*.pdf'.")
@click.option("--vector-index", type=click.Choice(["exact", "hnsw"]), default="exact", show_default=True,
              help="Dense search: exact (what the baseline measures) or the approximate HNSW graph.")
@click.option("--lexical", type=click.Choice(["reference", "stemmed"]), default="stemmed", show_default=True,
              help="Tokenisation of BM25 and exact words: the reference's [a-z0-9]+ or stemmed Unicode words.")
@click.option("--no-html", is_flag=True, help="Skip report.html and its PNGs (no matplotlib needed).")
@click.option("--rerank", "rerank_model", metavar="MODEL_DIR", default=None,
              help="Also evaluate hybrid+rerank: hybrid's shortlist reordered by this cross-encoder folder.")
@click.option("--shortlist", type=click.IntRange(1, 1000), default=25, show_default=True,
              help="Hits the reranker scores.")
@click.option("--generate", is_flag=True, help="Also answer every query through the answer pipeline (first "
              "strategy, dense unless --retrievers lacks it, reranked with --rerank) and report answer figures.")
@generator_options(default="extractive")
@click.option("--conversations", "conversations_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="conversations.jsonl: measure only follow-up retrieval (the last turn alone, the LLM-free fold, "
              "and with --generator llama or openai the LLM's rewrite) on the first strategy and retriever.")
@click.option("--judge", "judge_url", metavar="URL", default=None,
              help="With --generate: an OpenAI-compatible endpoint (http://HOST:PORT/v1) whose model scores each "
              "answer 0-10 for correctness, grounding and conciseness.")
@click.option("--judge-model", default="", help="The judge's model name, as its endpoint knows it.")
@click.option("--judge-key-env", default="OPENAI_API_KEY", show_default=True,
              help="The variable holding the judge endpoint's API key, if it needs one.")
def eval_command(dev_set_dir: Path | None, corpus: Path | None, questions: Path | None, ood: Path | None,
                 phrases: Path | None, strategies: str, retrievers: str, embedders: str,
                 out: Path, cache: Path | None, cost_ratio: float, threshold: float | None, baseline: Path | None,
                 gate: bool, exclude: tuple[str, ...], vector_index: str, lexical: str, no_html: bool,
                 rerank_model: str | None,
                 shortlist: int,
                 generate: bool, generator: str, llm_model_path: str | None, openai_base_url: str | None,
                 openai_model: str | None, generator_timeout: float | None, judge_url: str | None,
                 judge_model: str, judge_key_env: str, conversations_file: Path | None) -> None:
    """Measure retrieval on a needle ground truth: Recall@k, MRR, nDCG@10 with Wilson intervals, destroyed
    answers, paired sign tests, threshold calibration; optionally gate against a baseline report."""
    from citerag.eval.gate import compare
    from citerag.eval.report import attach_baseline, build_report, primary, to_markdown
    from citerag.eval.runner import parse_list, run_eval
    from citerag.eval.truth import load_ood, load_questions

    if dev_set_dir is not None:
        found = dev_set(dev_set_dir)
        corpus, questions = corpus or found.corpus, questions or found.questions
        ood, phrases = ood or found.ood, phrases or found.phrases
        exclude = exclude or found.exclude
    if corpus is None or questions is None:
        raise CiteragError("give --dev-set DIR, or --corpus DIR and --questions FILE")
    if gate and baseline is None:
        raise CiteragError("--gate needs --baseline REPORT.json")
    if judge_url and not generate:
        raise CiteragError("--judge needs --generate")
    if conversations_file is not None and (gate or generate or baseline):
        raise CiteragError("--conversations measures follow-ups alone: leave out --baseline, --gate and --generate")
    base = _load_report(baseline) if baseline else None  # fail fast, before hours of embedding
    strategy_list = parse_list(strategies, list("ABCDEFG"), "strategy")
    retriever_list = parse_list(retrievers, list(MODES), "retriever")
    embedder_list = parse_list(embedders, None, "embedder")
    qs = load_questions(questions)
    oods = load_ood(ood) if ood else []
    pasted = load_questions(phrases) if phrases else []
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CiteragError(f"cannot create {out}: {exc.strerror}") from exc
    # Every index of the run starts from these settings (never from the environment or a config file: the
    # evaluation measures exactly what its flags say).
    defaults = Settings().with_changes(threshold=threshold, generator=generator, llm_model_path=llm_model_path,
                                   openai_base_url=openai_base_url, openai_model=openai_model,
                                   generator_timeout=generator_timeout, vector_index=vector_index,
                                   lexical=lexical)
    ref = defaults.threshold
    app = Citerag()
    if conversations_file is not None:
        from citerag.cli.eval_followups import run_followups

        with app:
            run_followups(app, defaults, corpus, exclude, conversations_file, out, cache or out / "indexes",
                          strategy_list[0], retriever_list[0], embedder_list[0])
        return
    if rerank_model:
        app.reranker(rerank_model)  # fail fast on a bad folder, before hours of embedding
    hook = None
    if generate:
        options = AskOptions(mode="dense" if "dense" in retriever_list else retriever_list[0],
                             rerank_model=rerank_model or "", shortlist=shortlist)
        judge = _judge(app, judge_url, judge_model, judge_key_env, generator_timeout) if judge_url else None
        hook = _generate_hook(qs, oods, options, judge)
    with app:
        run = run_eval(corpus, qs, oods, strategies=strategy_list, retrievers=retriever_list,
                       embedders=embedder_list, cache=cache or out / "indexes", exclude=exclude,
                       log=lambda s: click.echo(s, err=True), rerank_model=rerank_model or "", shortlist=shortlist,
                       generate=hook, generate_strategy="E" if "E" in strategy_list else strategy_list[0],
                       settings=defaults, app=app, phrases=pasted)
    settings = {"corpus": str(corpus), "questions": str(questions), "ood": str(ood) if ood else None,
                "phrases": str(phrases) if phrases else None,
                "strategies": strategy_list, "retrievers": retriever_list, "embedders": embedder_list,
                "exclude": list(exclude), "vector_index": vector_index, "lexical": lexical,
                "rerank": rerank_model or None,
                "shortlist": shortlist if rerank_model else None, "generate": generator if generate else None}
    report = build_report(run, qs, oods, settings, cost_ratio=cost_ratio, reference_threshold=ref, phrases=pasted)
    result = None
    if base is not None and baseline is not None:
        result = compare(report, base)
        attach_baseline(report, str(baseline), result)
        judged = (report.get("answers") or {}).get("judge")
        if judged:  # the judge's scores paired with the baseline's, question by question
            from citerag.eval.judge import paired_against

            judged["against_baseline"] = paired_against(judged, (base.get("answers") or {}).get("judge"))
    _write(out / "report.json", json.dumps(report, ensure_ascii=False, separators=(",", ":")) + "\n")
    _write(out / "report.md", to_markdown(report))
    if not no_html:
        from citerag.eval.html import to_html

        def save(name: str, png: bytes) -> None:
            try:
                (out / name).write_bytes(png)
            except OSError as exc:
                raise CiteragError(f"cannot write {out / name}: {exc.strerror}") from exc

        _write(out / "report.html", to_html(report, save))
    for c in report["configurations"]:
        m = c["metrics"]
        cost = c.get("rerank_latency")
        click.echo(f"{c['id']:<40} R@1 {m['recall@1']['value']:.3f}  R@4 {m['recall@4']['value']:.3f}  "
                   f"MRR {m['mrr']['value']:.3f}  B@2000 {m['budget@2000']['value']:.3f}  "
                   f"destroyed {len(c['destroyed'])}"
                   + (f"  rerank p50 {cost['p50_ms']:.0f} ms p95 {cost['p95_ms']:.0f} ms" if cost else "")
                   + (f"  exact words R@4 {c['phrases']['recall@4']['value']:.3f}" if c.get("phrases") else ""))
    r = primary(report).get("refusal_rule") if report["configurations"] else None
    if r:
        b = r["bluffs"]
        groups = ", ".join(f"{g} {b[g]['count']}/{b[g]['n']}" for g in ("near", "traps", "far"))
        lexical = "" if r.get("lexical_threshold") is None else f", lexical {r['lexical_threshold']:.3f}"
        click.echo(f"calibrated refusal ({primary(report)['id']}, cut {r['threshold']:.3f}{lexical}): refused "
                   f"{r['refused']['count']}/{r['refused']['n']}  bluffs {b['count']}/{b['n']} ({groups})")
    a = report.get("answers")
    if a:
        click.echo(f"answers {a['configuration']} ({a['generator']}): refused {a['refused']['count']}/{a['in_domain']}"
                   f"  bluffs {a['bluffs']['count']}/{a['ood']}  citation accuracy "
                   f"{a['citation_accuracy']['pooled']['value']:.3f}  needle-supported "
                   f"{a['needle_supported']['count']}/{a['in_domain']}"
                   + (f"  gold answer {a['gold_answer']['count']}/{a['gold_answer']['n']}"
                      if a.get("gold_answer") else ""))
        if j := a.get("judge"):
            click.echo(f"judge {j['model']} ({j['parsed']}/{j['judged']} read): " + "  ".join(
                f"{k} {'-' if c['mean'] is None else format(c['mean'], '.2f')}/10" for k, c in j["criteria"].items()))
    click.echo(f"wrote {out / 'report.json'}, report.md{'' if no_html else ', report.html'} "
               f"({run.seconds:.0f} s)")
    if result is not None:
        for note in result.notes:
            click.echo(f"note: {note}", err=True)
        if result.failures:
            for failure in result.failures:
                click.echo(f"regression: {failure}", err=True)
            if gate:
                raise CiteragError(f"regression gate failed: {len(result.failures)} significant regression(s) "
                                   f"against {baseline}")
        else:
            click.echo(f"gate: no significant regression against {baseline}")
