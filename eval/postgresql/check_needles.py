#!/usr/bin/env python3
"""Verify the PostgreSQL 15 manual retrieval ground-truth set.

Usage (from anywhere; paths are relative to this file's folder):

    python3 check_needles.py                 # verify everything, print PASS/FAIL
    python3 check_needles.py --parser xml    # parse the XHTML with lxml's XML parser instead

Needs: lxml (the parser citerag's own HTML extractor uses). Exit status 0 and a final
line starting with "PASS" when every rule holds, exit status 1 and a final line
starting with "FAIL" otherwise.

Rules checked for every ground truth in questions.jsonl (see README.md):
  * at least 30 truths pg-01..pg-NN (contiguous), each asked once as "doc" and once as
    "ticket"; ids, truth ids, style, needle and source are consistent; keys exactly
    id, truth, style, query, needle, source; no query contains its needle nor shares a
    run of 6 or more consecutive words with it; the doc and ticket queries differ;
  * the needle is 8..35 words, already whitespace-collapsed;
  * the needle occurs EXACTLY ONCE in the whitespace-collapsed text of the <body> of the
    corpus HTML files (summed), in the file named by "source";
  * it occurs EXACTLY ONCE in the whitespace-collapsed raw HTML sources (summed), which
    proves that no tag, entity or attribute interrupts it;
  * the innermost <p>/<dd>/<li> whose collapsed text contains it exists and is unique,
    and neither it nor any ancestor is a heading (h1-h6), a table, a <pre>, a <title>,
    an admonition (div.note/tip/warning/caution/important), an example block, or a
    TOC/navigation/titlepage block, and it is not a caption (p.title);
  * needles sit in at least 12 different corpus files.
phrases.jsonl (optional; exact-phrase queries): keys id, truth, style == "exact", query,
needle, source; ids unique; the whitespace-collapsed query is a substring of the needle;
the needle obeys the needle rules above (length, unique in text and raw HTML, one clean
paragraph); the query occurs exactly once in the corpus text (case-insensitive,
whitespace-collapsed), so exactly one passage is right.
Plus: corpus/ holds the 18 HTML files unchanged (sha256) and LICENSE; ood.jsonl has 30
queries (>= 15 near, >= 8 far, >= 10 near traps marked "trap": true) whose registered
key terms are absent from the corpus, and every trap's (and near-miss's) bait phrase is
present in its query and in the corpus.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

import lxml.etree
import lxml.html

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

# postgresql-doc-15 15.20-0+deb12u1, /usr/share/doc/postgresql-doc-15/html/<file>
SHA256 = {
    "auth-pg-hba-conf.html": "10d20d40f03e4537b114e69fc56c6eed6f9ac9ae479e9a4f57fc4815abfd5343",
    "backup-dump.html": "157ba7c84d7b7d1d3dddf48c77475f679b0b758167f412132ceccd9c79e34aee",
    "client-authentication-problems.html": "9c947e87d206965a8622b35f1ddfa80d6f479e5ef3f38405453454bf45e7421e",
    "continuous-archiving.html": "cc6b051b69500af24b8d18a4de37abe60de0efd811831ed1e38088224ba0521d",
    "datatype-datetime.html": "00535f58839a780d04492feb83258fb09fffc9d40bd66368eaeebf3aa4fd31d4",
    "datatype-json.html": "bad58df68a77a6d9782caa0e144868888b06297be2892dcb777b29fb7b6361cd",
    "ddl-constraints.html": "dead6970b445c57c5a5bd174b87ede73cef7e0708946ceb811edbaf159b3aeca",
    "ddl-partitioning.html": "f8f12319bec8971b2bd0365688d03ae443fccb90e40f815f9d38fc3228aae629",
    "ddl-rowsecurity.html": "6c74f191461ade7d88961633cb14517378f6ffbfc627be698e5960ba23414cd5",
    "explicit-locking.html": "59798994a822bab5e0dd7eb5a7a1788801acc9d590f6b18ea24b2e46c5a4405c",
    "indexes-types.html": "066b38731a78d486214e5fe5edf65e75b5504b21a8a358d696a2a4b4e4ed3e8c",
    "locale.html": "4df40a9176ad18e4121f10bfb8c23b252001797954b1cc89faf89440b001e947",
    "populate.html": "6c3675e32df983144d80d1f2d0862f6462ffed388e58443ff13c54647b06c7fe",
    "routine-vacuuming.html": "654e4138393298e086a8a089365fe6dca8c888f8e03a392491531dbdfb5f00d6",
    "runtime-config-connection.html": "97578da824175e05ceb7849079df64438488205d97d845825c34bc2bd09ad079",
    "transaction-iso.html": "3dc3740b6a36ed45770eb0683cc2db2808f953c713ce2dfb45e49ecdf7fc41a9",
    "using-explain.html": "482dc018fd7872317b858b6e13fc29fa4958bed0e70f1db0d1a5a49a05eb7f94",
    "wal-configuration.html": "471fcb816492da7884eabfc88463d2586d90bf43823cc89b71c044a5541c3378",
}
HTML_FILES = sorted(SHA256)

MIN_TRUTHS, MIN_WORDS, MAX_WORDS, MIN_FILES, MAX_SHARED_RUN = 30, 8, 35, 12, 5
N_OOD, MIN_NEAR, MIN_FAR, MIN_TRAPS = 30, 15, 8, 10

PARA_TAGS = {"p", "dd", "li"}
BAD_ANCESTOR_TAGS = {"h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr",
                     "td", "th", "caption", "pre", "title", "head"}
BAD_CLASSES = {"toc", "navheader", "navfooter", "titlepage", "table", "informaltable",
               "table-contents", "list-of-tables", "list-of-figures", "list-of-examples",
               "note", "tip", "caution", "warning", "important", "example", "informalexample",
               "programlisting", "screen", "synopsis"}

# OOD: case-insensitive regexes for key terms that must NOT occur in the corpus text.
# For traps these are the terms of what is really asked (the bait itself is present).
OOD_ABSENT = {
    "pg-ood-01": [r"PgBouncer", r"default_pool_size"],
    "pg-ood-02": [r"bcrypt", r"web app", r"argon"],
    "pg-ood-03": [r"growpart", r"virtual disk", r"resize2fs", r"fdisk"],
    "pg-ood-04": [r"\bJava\b", r"serialVersionUID", r"HTTP session"],
    "pg-ood-05": [r"goroutine", r"\bGo program"],
    "pg-ood-06": [r"audit", r"log_statement"],
    "pg-ood-07": [r"Let's Encrypt", r"\brenew", r"nginx", r"web server"],
    "pg-ood-08": [r"PUBLICATION", r"CREATE SUBSCRIPTION"],
    "pg-ood-09": [r"flavou?r", r"heatwave", r"forecast"],
    "pg-ood-10": [r"SQLite", r"VACUUM INTO"],
    "pg-ood-11": [r"InnoDB", r"MySQL", r"checkpoint age"],
    "pg-ood-12": [r"io_uring", r"kernel version"],
    "pg-ood-13": [r"MongoDB", r"aggregation pipeline"],
    "pg-ood-14": [r"Django", r"squash"],
    "pg-ood-15": [r"Redis", r"maxmemory", r"evict"],
    "pg-ood-16": [r"\bRDS\b", r"Amazon", r"parameter group"],
    "pg-ood-17": [r"pgvector", r"HNSW", r"cosine", r"embedding"],
    "pg-ood-18": [r"Timescale", r"hypertable", r"continuous aggregate"],
    "pg-ood-19": [r"Patroni", r"etcd", r"switchover"],
    "pg-ood-20": [r"SQLAlchemy", r"DetachedInstance"],
    "pg-ood-21": [r"sourdough", r"fridge"],
    "pg-ood-22": [r"robot", r"vacuum cleaner", r"pet hair", r"carpet"],
    "pg-ood-23": [r"jet lag", r"flying", r"holiday"],
    "pg-ood-24": [r"puncture", r"bicycle", r"inner tube"],
    "pg-ood-25": [r"fiddle", r"\bfig\b", r"winter"],
    "pg-ood-26": [r"marathon", r"training plan"],
    "pg-ood-27": [r"wedding", r"best man"],
    "pg-ood-28": [r"brush", r"paint", r"gloss"],
    "pg-ood-29": [r"guitar", r"chord"],
    "pg-ood-30": [r"limescale", r"kettle"],
}
# Near-domain traps: (bait phrase that MUST occur in the query and in the corpus file given).
OOD_TRAPS = {
    "pg-ood-01": ("connection pool", "transaction-iso.html"),
    "pg-ood-02": ("SCRAM-SHA-256", "auth-pg-hba-conf.html"),
    "pg-ood-03": ("partition", "ddl-partitioning.html"),
    "pg-ood-04": ("Serializable", "transaction-iso.html"),
    "pg-ood-05": ("deadlock", "explicit-locking.html"),
    "pg-ood-06": ("timeline", "continuous-archiving.html"),
    "pg-ood-07": ("SSL server certificate", "runtime-config-connection.html"),
    "pg-ood-08": ("logical replication", "auth-pg-hba-conf.html"),
    "pg-ood-09": ("ice cream company", "ddl-partitioning.html"),
    "pg-ood-10": ("VACUUM", "routine-vacuuming.html"),
    "pg-ood-11": ("checkpoint", "wal-configuration.html"),
    "pg-ood-12": ("kernel", "runtime-config-connection.html"),
}
# Far queries with a lexical near-miss (not counted as traps; the bait must still be there).
OOD_NEAR_MISS = {
    "pg-ood-22": ("vacuum", "routine-vacuuming.html"),
    "pg-ood-23": ("time zones", "datatype-datetime.html"),
}


def ws(s: str) -> str:
    """Collapse every run of whitespace to one space (the matching rule)."""
    return re.sub(r"\s+", " ", s)


def word_run(a: str, b: str) -> int:
    """Longest run of consecutive shared words (lower-cased alphanumeric tokens)."""
    ta, tb = re.findall(r"[a-z0-9]+", a.lower()), re.findall(r"[a-z0-9]+", b.lower())
    best = 0
    for i in range(len(ta)):
        for j in range(len(tb)):
            k = 0
            while i + k < len(ta) and j + k < len(tb) and ta[i + k] == tb[j + k]:
                k += 1
            best = max(best, k)
    return best


def local(el) -> str:
    return el.tag.rsplit("}", 1)[-1].lower() if isinstance(el.tag, str) else ""


def classes(el) -> set[str]:
    return set((el.get("class") or "").split())


def text_of(el) -> str:
    return "".join(el.itertext())


def parse(path: str, parser: str):
    data = Path(path).read_bytes()
    if parser == "xml":
        root = lxml.etree.fromstring(data, lxml.etree.XMLParser(huge_tree=True, no_network=True,
                                                                 resolve_entities=False))
    else:
        root = lxml.html.document_fromstring(data, parser=lxml.html.HTMLParser(huge_tree=True))
    return next(el for el in root.iter() if local(el) == "body")


class Checker:
    def __init__(self, parser: str) -> None:
        self.problems: list[str] = []
        self.bodies = {f: parse(os.path.join(CORPUS, f), parser) for f in HTML_FILES}
        self.texts = {f: ws(text_of(b)) for f, b in self.bodies.items()}
        self.raws = {f: ws(Path(CORPUS, f).read_text(encoding="utf-8")) for f in HTML_FILES}
        self.paras = {f: [el for el in b.iter() if local(el) in PARA_TAGS] for f, b in self.bodies.items()}

    def fail(self, msg: str) -> None:
        self.problems.append(msg)
        print("  PROBLEM:", msg)

    def check_needle(self, t: str, needle: str, src: str) -> bool:
        """Rules 1-4 for one needle; True when all hold."""
        before = len(self.problems)
        if needle != ws(needle).strip():
            self.fail(f"{t}: needle is not whitespace-collapsed/stripped")
        n = ws(needle).strip()
        nw = len(n.split())
        if not MIN_WORDS <= nw <= MAX_WORDS:
            self.fail(f"{t}: needle has {nw} words (allowed {MIN_WORDS}..{MAX_WORDS})")
        if src not in HTML_FILES:
            self.fail(f"{t}: source {src!r} is not one of the {len(HTML_FILES)} corpus HTML files")
            return False
        tcount = {f: self.texts[f].count(n) for f in HTML_FILES}
        rcount = {f: self.raws[f].count(n) for f in HTML_FILES}
        if sum(tcount.values()) != 1:
            self.fail(f"{t}: needle occurs {sum(tcount.values())}x in the corpus body text (need 1)")
        elif tcount[src] != 1:
            self.fail(f"{t}: needle found in {[f for f, c in tcount.items() if c]} not in source {src}")
        if sum(rcount.values()) != 1:
            self.fail(f"{t}: needle occurs {sum(rcount.values())}x in the raw HTML sources (need 1;"
                      " 0 means a tag or entity splits it)")
        hits = [el for el in self.paras[src] if n in ws(text_of(el)) and not any(
            n in ws(text_of(c)) for c in el.iter() if c is not el and local(c) in PARA_TAGS)]
        if len(hits) != 1:
            self.fail(f"{t}: {len(hits)} innermost <p>/<dd>/<li> elements contain the needle (need 1)")
        else:
            el = hits[0]
            bad = [f"{local(el)}.title"] if "title" in classes(el) else []
            for a in el.iterancestors():
                if local(a) in BAD_ANCESTOR_TAGS:
                    bad.append(local(a))
                if classes(a) & BAD_CLASSES:
                    bad.append(f"{local(a)}.{'.'.join(sorted(classes(a) & BAD_CLASSES))}")
            if bad:
                self.fail(f"{t}: needle's element sits inside forbidden context {bad}")
        return len(self.problems) == before


def load_jsonl(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parser", choices=("html", "xml"), default="html",
                    help="lxml.html (default; what citerag's extractor uses) or lxml's XML parser")
    args = ap.parse_args()

    print("== corpus/")
    pre: list[str] = []
    for f, digest in SHA256.items():
        p = os.path.join(CORPUS, f)
        if not os.path.isfile(p):
            pre.append(f"corpus/{f} missing")
        elif hashlib.sha256(Path(p).read_bytes()).hexdigest() != digest:
            pre.append(f"corpus/{f} differs from the packaged original")
    lic = os.path.join(CORPUS, "LICENSE")
    lic_text = Path(lic).read_text(encoding="utf-8") if os.path.isfile(lic) else ""
    if "postgresql-doc-15" not in lic_text or "PostgreSQL Database Management System" not in lic_text:
        pre.append("corpus/LICENSE missing or lacks the provenance / licence text")
    extra = sorted(set(os.listdir(CORPUS)) - set(SHA256) - {"LICENSE"})
    if extra:
        pre.append(f"unexpected files in corpus/: {extra}")
    if any("missing" in m and "LICENSE" not in m for m in pre):
        for m in pre:
            print("  PROBLEM:", m)
        print(f"FAIL: {len(pre)} problem(s)")
        return 1
    ck = Checker(args.parser)
    for m in pre:
        ck.fail(m)
    print(f"  {len(SHA256)} HTML files checked against sha256; LICENSE present")

    # ---- questions.jsonl
    print("== questions.jsonl")
    rows = load_jsonl(os.path.join(HERE, "questions.jsonl"))
    keys = {"id", "truth", "style", "query", "needle", "source"}
    for i, n in Counter(r.get("id") for r in rows).items():
        if n > 1:
            ck.fail(f"duplicate id {i}")
    truths: dict[str, dict[str, dict]] = {}
    for r in rows:
        if set(r) != keys:
            ck.fail(f"{r.get('id')}: keys {sorted(r)} != {sorted(keys)}")
            continue
        if r["style"] not in ("doc", "ticket"):
            ck.fail(f"{r['id']}: bad style {r['style']!r}")
        if r["id"] != f"{r['truth']}-{r['style']}":
            ck.fail(f"{r['id']}: id does not equal truth-style")
        truths.setdefault(r["truth"], {})[r["style"]] = r
    n_truths = len(truths)
    expected = [f"pg-{i:02d}" for i in range(1, n_truths + 1)]
    if sorted(truths) != expected or n_truths < MIN_TRUTHS:
        ck.fail(f"truth ids are not pg-01..pg-NN with NN >= {MIN_TRUTHS} (have {n_truths})")
    needle_files: Counter[str] = Counter()
    needles_seen: Counter[str] = Counter()
    for t in sorted(truths):
        pair = truths[t]
        if set(pair) != {"doc", "ticket"}:
            ck.fail(f"{t}: needs exactly one doc and one ticket query, has {sorted(pair)}")
            continue
        d, k = pair["doc"], pair["ticket"]
        if d["needle"] != k["needle"] or d["source"] != k["source"]:
            ck.fail(f"{t}: doc and ticket rows disagree on needle/source")
        if ws(d["query"]).strip().lower() == ws(k["query"]).strip().lower():
            ck.fail(f"{t}: doc and ticket queries are identical")
        n = ws(d["needle"]).strip()
        needles_seen[n] += 1
        for row in (d, k):
            if n.lower() in ws(row["query"]).lower():
                ck.fail(f"{row['id']}: query contains the needle")
            run = word_run(row["query"], n)
            if run > MAX_SHARED_RUN:
                ck.fail(f"{row['id']}: query shares a {run}-word run with the needle")
        ck.check_needle(t, d["needle"], d["source"])
        needle_files[d["source"]] += 1
    for n, c in needles_seen.items():
        if c > 1:
            ck.fail(f"needle used by {c} truths: {n[:60]}")
    nfiles = len(needle_files)
    print(f"  {n_truths} truths, {len(rows)} queries; needles in {nfiles}/{len(HTML_FILES)} files: "
          + ", ".join(f"{f.removesuffix('.html')}={c}" for f, c in sorted(needle_files.items())))
    if nfiles < MIN_FILES:
        ck.fail(f"needles cover only {nfiles} files (need >= {MIN_FILES})")

    # ---- phrases.jsonl (optional)
    phrases_path = os.path.join(HERE, "phrases.jsonl")
    n_phr = None
    if os.path.exists(phrases_path):
        print("== phrases.jsonl")
        phr = load_jsonl(phrases_path)
        n_phr = len(phr)
        pkeys = {"id", "truth", "style", "query", "needle", "source"}
        for i, n in Counter(r.get("id") for r in phr).items():
            if n > 1:
                ck.fail(f"phrases: duplicate id {i}")
        all_lower = [x.lower() for x in ck.texts.values()]
        for r in phr:
            rid = r.get("id")
            if set(r) != pkeys:
                ck.fail(f"phrases {rid}: keys {sorted(r)} != {sorted(pkeys)}")
                continue
            if r["style"] != "exact":
                ck.fail(f"phrases {rid}: style {r['style']!r} != 'exact'")
            q = ws(r["query"]).strip()
            if not q:
                ck.fail(f"phrases {rid}: empty query")
                continue
            if q not in ws(r["needle"]):
                ck.fail(f"phrases {rid}: query is not a substring of its needle")
            ck.check_needle(f"phrases {rid}", r["needle"], r["source"])
            qc = sum(x.count(q.lower()) for x in all_lower)
            if qc != 1:
                ck.fail(f"phrases {rid}: query occurs {qc}x in the corpus text (case-insensitive; need 1)")
        print(f"  {n_phr} exact-phrase queries checked")

    # ---- ood.jsonl
    print("== ood.jsonl")
    ood = load_jsonl(os.path.join(HERE, "ood.jsonl"))
    kinds = Counter(o.get("kind") for o in ood)
    traps = {o.get("id") for o in ood if o.get("trap") is True}
    if len(ood) != N_OOD or kinds["near"] < MIN_NEAR or kinds["far"] < MIN_FAR \
            or kinds["near"] + kinds["far"] != len(ood):
        ck.fail(f"ood.jsonl: {len(ood)} lines, kinds {dict(kinds)} (need {N_OOD}: >= {MIN_NEAR} near,"
                f" >= {MIN_FAR} far)")
    if [o.get("id") for o in ood] != [f"pg-ood-{i:02d}" for i in range(1, N_OOD + 1)]:
        ck.fail(f"ood ids are not pg-ood-01..pg-ood-{N_OOD} in order")
    all_text = " \n ".join(ck.texts.values())
    by_id = {o.get("id"): o for o in ood}
    for o in ood:
        oid = o.get("id")
        if not {"id", "kind", "query"} <= set(o) <= {"id", "kind", "query", "trap"}:
            ck.fail(f"{oid}: keys {sorted(o)}")
        if "trap" in o and o["trap"] is not True:
            ck.fail(f"{oid}: 'trap' must be true when present")
        if o.get("trap") and o.get("kind") != "near":
            ck.fail(f"{oid}: traps must be near-domain")
        for pat in OOD_ABSENT.get(oid, [None]):
            if pat is None:
                ck.fail(f"{oid}: no key terms registered")
            elif re.search(pat, all_text, re.I):
                ck.fail(f"{oid}: key term /{pat}/ occurs in the corpus")
    if traps != set(OOD_TRAPS):
        ck.fail(f"rows marked trap {sorted(traps)} != registered traps {sorted(OOD_TRAPS)}")
    if len(traps) < MIN_TRAPS:
        ck.fail(f"only {len(traps)} near-domain traps (need >= {MIN_TRAPS})")
    for oid, (bait, f) in {**OOD_TRAPS, **OOD_NEAR_MISS}.items():
        if bait not in by_id.get(oid, {}).get("query", ""):
            ck.fail(f"{oid}: query lacks its bait phrase {bait!r}")
        if bait not in ck.texts[f]:
            ck.fail(f"{oid}: bait phrase {bait!r} not found in {f}")
    print(f"  {len(ood)} queries ({kinds['near']} near incl. {len(traps)} traps, {kinds['far']} far);"
          f" key terms absent; {len(OOD_TRAPS) + len(OOD_NEAR_MISS)} bait phrases present in corpus")

    if ck.problems:
        print(f"FAIL: {len(ck.problems)} problem(s)")
        return 1
    print(f"PASS: {n_truths} truths / {len(rows)} queries, needles unique and tag-free in "
          f"{nfiles}/{len(HTML_FILES)} files, "
          + (f"{n_phr} exact phrases, " if n_phr is not None else "")
          + f"{len(ood)} OOD queries ({len(traps)} traps), corpus intact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
