#!/usr/bin/env python3
"""Verify the German Debian Reference retrieval ground-truth set (debian-reference-de).

Usage (from anywhere; paths are relative to this file's folder):

    python3 check_needles.py                    # verify everything, print PASS/FAIL
    python3 check_needles.py --parser xml       # parse the XHTML with lxml's XML parser instead
    python3 check_needles.py --skip-questions   # everything except questions.jsonl

Needs: lxml only (the parser citerag's own HTML extractor uses). Exit status 0 and a
final line starting with "PASS" when every rule holds, exit status 1 and a final line
starting with "FAIL" otherwise.

Rules checked for every ground truth in questions.jsonl (see README.md):
  * 80 lines = 40 truths de-01..de-40 x {doc, ticket}; keys id, truth, style, query,
    needle, source and optionally needle_lang ("de" or "en": "en" where the German
    edition left the paragraph untranslated); ids, truth ids, style, needle, source and
    needle_lang consistent within a pair; no query contains its needle nor shares a run
    of 6 or more consecutive words (lower-cased Unicode \\w+ tokens) with it; the doc and
    ticket queries differ; no two truths share a needle;
  * the needle is 8..35 words, already whitespace-collapsed;
  * it occurs EXACTLY ONCE in the whitespace-collapsed text of the <body> of the 14
    corpus HTML files (summed), in the file named by "source";
  * it occurs EXACTLY ONCE in the whitespace-collapsed raw HTML sources (summed), which
    proves that no tag, entity or attribute interrupts it;
  * the innermost <p>/<dd>/<li> whose collapsed text contains it exists and is unique,
    and neither it nor any ancestor is a heading (h1-h6), a table (DocBook admonitions
    and table captions p.title included), a <pre>, a <title>, or a TOC / navigation /
    title-page block;
  * the needle's language agrees with needle_lang (a stop-word count, see needle_language);
  * needles sit in at least 12 of the 14 files.
phrases.jsonl (exact-words queries): 30 rows de-x01..de-x30, keys id, truth (== id),
style == "exact", query, needle, source; the whitespace-collapsed query is a substring
of its needle; the needle obeys the needle rules above; the query occurs exactly once in
the corpus text (case-insensitive, whitespace-collapsed); needles in >= 10 files.
ood.jsonl: 30 queries de-ood-01..de-ood-30 (21 near, 9 far); the registered key terms of
each are absent from the German corpus text AND from the English corpus text
(../debian-reference/corpus, which the cross-lingual sets pair with these queries);
at least 4 near-domain traps, marked "trap": true, exactly the registered ones, whose
bait phrase occurs in the query and in the named German corpus file.
Plus: corpus/ holds the 14 HTML files unchanged (sha256) and LICENSE.
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
EN_CORPUS = os.path.join(HERE, os.pardir, "debian-reference", "corpus")
HTML_FILES = ["pr01.de.html"] + [f"ch{i:02d}.de.html" for i in range(1, 13)] + ["apa.de.html"]
EN_FILES = [f.replace(".de.", ".en.") for f in HTML_FILES]

# debian-reference-de_2.100_all.deb, /usr/share/debian-reference/<file>
SHA256 = {
    "apa.de.html": "abe271ffaae5415b2d25feea932e8d739125f78061ab4fac6e609817f3bda7e5",
    "ch01.de.html": "e66ed80eb88b52237a9553c701ac1fcd7de17801ab91254ab407795b92ae53d2",
    "ch02.de.html": "e987035c7ce845b4bc13c5200e4e0776f791b2556430984bd358cac4bd074918",
    "ch03.de.html": "ef12e4c6b436142e1f254bfd00dc53c14ce6b1b7cd828bfe7b0956c8d4466b01",
    "ch04.de.html": "f8293ea4674060e21eab5608cf51510873d466932b04f5aabc8337d7c195ede2",
    "ch05.de.html": "dc4bf94ee335a249cd81f1e37cb694d21d3976b76cd8e8c34af1fc8ba695654b",
    "ch06.de.html": "476c55e85c4b66d589ccdfac0dcce2b32161a44ca51554ab2bddc0bf1328f4b7",
    "ch07.de.html": "de8e00cf57f67dced578f91d5288a160c8952ebce16791849cf22abaae8167bc",
    "ch08.de.html": "35aee2e3fb760693510d501430193b64523e9106c66b7be799c16e3a838a3012",
    "ch09.de.html": "dad4c9126400e67c8b137211878173747e4b1a96e7d7b54b74d7ea4515b2edb3",
    "ch10.de.html": "c4e2c09ca9f0f50cd95277b557db3f19c1398770df9fbc7a632b60df61913167",
    "ch11.de.html": "73dc43fab948f32f8155498dbe731bf84cefcf77f96ff68e8ea9c782ae311a69",
    "ch12.de.html": "efd8fb46dc03f6e4efdf2526bd97ebb91f26843be703fa1fe773758d8f7f03f7",
    "pr01.de.html": "70ac6b4fc564ab742355709777f10941eee846aae08a14726649bf4b29fc861a",
}

N_TRUTHS, MIN_WORDS, MAX_WORDS, MIN_FILES, MAX_SHARED_RUN = 40, 8, 35, 12, 5
N_PHRASES, MIN_PHRASE_FILES = 30, 10
N_OOD, N_NEAR, N_FAR, MIN_TRAPS = 30, 21, 9, 4
NEEDLE_LANGS = ("de", "en")

PARA_TAGS = {"p", "dd", "li"}
BAD_ANCESTOR_TAGS = {"h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr",
                     "td", "th", "caption", "pre", "title", "head"}
BAD_CLASSES = {"toc", "navheader", "navfooter", "titlepage", "table", "informaltable",
               "table-contents", "list-of-tables", "list-of-figures", "list-of-examples",
               "note", "tip", "caution", "warning", "important"}

# OOD: case-insensitive regexes for the key terms of what is really asked; none may occur
# in the German or the English corpus text. For traps the bait itself is present.
OOD_ABSENT = {
    "de-ood-01": [r"Kubernetes", r"autoscal", r"Pod-"],
    "de-ood-02": [r"Gruppenrichtlinie", r"Group Policy", r"Kennwortschutz"],
    "de-ood-03": [r"Time.?Machine", r"macOS"],
    "de-ood-04": [r"\bAWS\b", r"\bIAM\b", r"\bS3\b", r"Bucket"],
    "de-ood-05": [r"\bReact\b", r"useEffect", r"Entwicklungsserver"],
    "de-ood-06": [r"Pivot", r"Excel", r"Umsatz"],
    "de-ood-07": [r"Terraform", r"State-Datei", r"Remote-Backend"],
    "de-ood-08": [r"Ansible", r"Playbook"],
    "de-ood-09": [r"WireGuard"],
    "de-ood-10": [r"CUDA", r"neuronal", r"neural"],
    "de-ood-11": [r"\bSteam\b", r"Proton"],
    "de-ood-12": [r"Raspberry", r"GPIO", r"Fingerabdruck-?Sensor", r"fingerprint sensor"],
    "de-ood-13": [r"certbot", r"Let.?s.Encrypt", r"letsencrypt", r"Zertifikat"],
    "de-ood-14": [r"A2DP", r"Kopfhörer", r"headphone", r"Headset"],
    "de-ood-15": [r"Kafka", r"Consumer-Gruppe", r"consumer group"],
    "de-ood-16": [r"Jenkins", r"Pull.Request"],
    "de-ood-17": [r"\bLFS\b", r"git-lfs", r"Large File Storage"],
    "de-ood-18": [r"pandas", r"DataFrame", r"Schlüsselspalte"],
    "de-ood-19": [r"Prometheus", r"Alertmanager", r"Alarmregel"],
    "de-ood-20": [r"Verbindungspool", r"connection pool", r"pgbouncer"],
    "de-ood-21": [r"Arbeitgeber", r"employer", r"copyright disclaimer", r"Verzichtserklärung"],
    "de-ood-22": [r"Sauerteig", r"sourdough", r"\bMehl\b"],
    "de-ood-23": [r"Reisepass", r"passport"],
    "de-ood-24": [r"Erstattung", r"refund", r"storni", r"Bestellung"],
    "de-ood-25": [r"Fußball", r"football", r"offside"],
    "de-ood-26": [r"\bstrick", r"Maschen", r"\bSchal\b", r"knit"],
    "de-ood-27": [r"Freiberufl", r"Arbeitszimmer", r"income tax", r"\babsetzen"],
    "de-ood-28": [r"Welpe", r"puppy", r"beißen"],
    "de-ood-29": [r"Reifendruck", r"tyre", r"tire pressure"],
    "de-ood-30": [r"Rotwein", r"Teppich", r"carpet", r"Flecken", r"stain"],
}
# Near-domain traps: (bait phrase that MUST occur in the query and, case-sensitive, in
# the named German corpus file). The question around the bait is not answered.
OOD_TRAPS = {
    "de-ood-02": ("Bildschirmschoner", "ch09.de.html"),
    "de-ood-03": ("Passwort-Schlüsselbund", "ch10.de.html"),
    "de-ood-06": ("Tabellenkalkulation", "ch07.de.html"),
    "de-ood-12": ("Fingerabdruck", "ch10.de.html"),
    "de-ood-20": ("Pool-Größe", "ch11.de.html"),
    "de-ood-21": ("Yoyodyne, Inc., hereby disclaims all copyright interest in the program",
                  "ch01.de.html"),
}
# Far queries with a lexical near-miss (not traps; bait checked case-insensitively,
# because German capitalises nouns: "im Abseits" vs. "abseits von Git").
OOD_NEAR_MISS = {
    "de-ood-25": ("Abseits", "ch10.de.html"),
    "de-ood-27": ("Steuer", "ch01.de.html"),
}

# Stop words for the needle_lang sanity check (a needle is short; these are enough).
STOP_DE = {"der", "die", "das", "und", "ist", "nicht", "sie", "ein", "eine", "einen", "mit",
           "für", "von", "auf", "den", "dem", "des", "wird", "werden", "sind", "zu", "im",
           "oder", "auch", "wenn", "kann", "können", "es", "sich", "dass", "als", "bei"}
STOP_EN = {"the", "and", "is", "not", "you", "a", "an", "with", "for", "of", "on", "to",
           "are", "be", "it", "or", "if", "can", "this", "that", "by", "from", "as", "which"}


def ws(s: str) -> str:
    """Collapse every run of whitespace to one space (the matching rule)."""
    return re.sub(r"\s+", " ", s)


def tokens(s: str) -> list[str]:
    """Lower-cased Unicode word tokens (umlauts and ß stay inside their words)."""
    return re.findall(r"\w+", s.lower())


def word_run(a: str, b: str) -> int:
    """Longest run of consecutive shared words."""
    ta, tb = tokens(a), tokens(b)
    best = 0
    for i in range(len(ta)):
        for j in range(len(tb)):
            k = 0
            while i + k < len(ta) and j + k < len(tb) and ta[i + k] == tb[j + k]:
                k += 1
            best = max(best, k)
    return best


def needle_language(s: str) -> str | None:
    """'de' or 'en' when the stop words clearly say so, else None (undecided)."""
    t = tokens(s)
    de, en = sum(w in STOP_DE for w in t), sum(w in STOP_EN for w in t)
    if de >= 3 and de > 2 * en:
        return "de"
    if en >= 3 and en > 2 * de:
        return "en"
    return None


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
        # German joins with hyphens what English leaves apart ("OpenSSH-Daemon", "SSH-Protokoll"), so the
        # lower bound also accepts Unicode word runs; the upper bound counts whitespace-separated words.
        nw = len(n.split())
        if not (MIN_WORDS <= max(nw, len(re.findall(r"\w+", n))) and nw <= MAX_WORDS):
            self.fail(f"{t}: needle has {nw} words (allowed {MIN_WORDS}..{MAX_WORDS})")
        if src not in HTML_FILES:
            self.fail(f"{t}: source {src!r} is not one of the 14 corpus HTML files")
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


def check_questions(ck: Checker) -> tuple[int, int, int]:
    print("== questions.jsonl")
    rows = load_jsonl(os.path.join(HERE, "questions.jsonl"))
    if len(rows) != 2 * N_TRUTHS:
        ck.fail(f"questions.jsonl has {len(rows)} lines, expected {2 * N_TRUTHS}")
    keys = {"id", "truth", "style", "query", "needle", "source"}
    for i, n in Counter(r.get("id") for r in rows).items():
        if n > 1:
            ck.fail(f"duplicate id {i}")
    truths: dict[str, dict[str, dict]] = {}
    for r in rows:
        if not keys <= set(r) <= keys | {"needle_lang"}:
            ck.fail(f"{r.get('id')}: keys {sorted(r)} != {sorted(keys)} (+ optional needle_lang)")
            continue
        if r.get("needle_lang", "de") not in NEEDLE_LANGS:
            ck.fail(f"{r['id']}: needle_lang {r['needle_lang']!r} not in {NEEDLE_LANGS}")
        if r["style"] not in ("doc", "ticket"):
            ck.fail(f"{r['id']}: bad style {r['style']!r}")
        if r["id"] != f"{r['truth']}-{r['style']}":
            ck.fail(f"{r['id']}: id does not equal truth-style")
        truths.setdefault(r["truth"], {})[r["style"]] = r
    expected = [f"de-{i:02d}" for i in range(1, N_TRUTHS + 1)]
    if sorted(truths) != expected:
        ck.fail(f"truth ids are not de-01..de-{N_TRUTHS:02d}")
    needle_files: Counter[str] = Counter()
    needles_seen: Counter[str] = Counter()
    n_en = 0
    for t in sorted(truths):
        pair = truths[t]
        if set(pair) != {"doc", "ticket"}:
            ck.fail(f"{t}: needs exactly one doc and one ticket query, has {sorted(pair)}")
            continue
        d, k = pair["doc"], pair["ticket"]
        if d["needle"] != k["needle"] or d["source"] != k["source"]:
            ck.fail(f"{t}: doc and ticket rows disagree on needle/source")
        lang = d.get("needle_lang", "de")
        if lang != k.get("needle_lang", "de"):
            ck.fail(f"{t}: doc and ticket rows disagree on needle_lang")
        n_en += lang == "en"
        if ws(d["query"]).strip().lower() == ws(k["query"]).strip().lower():
            ck.fail(f"{t}: doc and ticket queries are identical")
        n = ws(d["needle"]).strip()
        needles_seen[n] += 1
        seen = needle_language(n)
        if seen is not None and seen != lang:
            ck.fail(f"{t}: needle reads as {seen!r} but needle_lang is {lang!r}")
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
    print(f"  {len(truths)} truths, {len(rows)} queries ({n_en} truths with needle_lang en); needles in"
          f" {nfiles}/14 files: " + ", ".join(f"{f.split('.')[0]}={c}" for f, c in sorted(needle_files.items())))
    if nfiles < MIN_FILES:
        ck.fail(f"needles cover only {nfiles} files (need >= {MIN_FILES})")
    return len(truths), len(rows), nfiles


def check_phrases(ck: Checker) -> int:
    print("== phrases.jsonl")
    phr = load_jsonl(os.path.join(HERE, "phrases.jsonl"))
    if [r.get("id") for r in phr] != [f"de-x{i:02d}" for i in range(1, N_PHRASES + 1)]:
        ck.fail(f"phrase ids are not de-x01..de-x{N_PHRASES} in order ({len(phr)} rows)")
    pkeys = {"id", "truth", "style", "query", "needle", "source"}
    all_lower = [x.lower() for x in ck.texts.values()]
    files: Counter[str] = Counter()
    needles = Counter(ws(r.get("needle", "")).strip() for r in phr)
    for n, c in needles.items():
        if c > 1:
            ck.fail(f"phrases: needle used by {c} rows: {n[:60]}")
    non_ascii = 0
    for r in phr:
        rid = r.get("id")
        if set(r) != pkeys:
            ck.fail(f"phrases {rid}: keys {sorted(r)} != {sorted(pkeys)}")
            continue
        if r["truth"] != rid:
            ck.fail(f"phrases {rid}: truth {r['truth']!r} != id")
        if r["style"] != "exact":
            ck.fail(f"phrases {rid}: style {r['style']!r} != 'exact'")
        q = ws(r["query"]).strip()
        if not q:
            ck.fail(f"phrases {rid}: empty query")
            continue
        non_ascii += any(ord(ch) > 127 for ch in q)
        if q not in ws(r["needle"]):
            ck.fail(f"phrases {rid}: query is not a substring of its needle")
        ck.check_needle(f"phrases {rid}", r["needle"], r["source"])
        qc = sum(x.count(q.lower()) for x in all_lower)
        if qc != 1:
            ck.fail(f"phrases {rid}: query occurs {qc}x in the corpus text (case-insensitive; need 1)")
        files[r["source"]] += 1
    print(f"  {len(phr)} exact-words queries ({non_ascii} with non-ASCII characters) in {len(files)}/14 files: "
          + ", ".join(f"{f.split('.')[0]}={c}" for f, c in sorted(files.items())))
    if len(files) < MIN_PHRASE_FILES:
        ck.fail(f"phrases cover only {len(files)} files (need >= {MIN_PHRASE_FILES})")
    return len(phr)


def check_ood(ck: Checker, parser: str) -> tuple[int, int]:
    print("== ood.jsonl")
    ood = load_jsonl(os.path.join(HERE, "ood.jsonl"))
    kinds = Counter(o.get("kind") for o in ood)
    if len(ood) != N_OOD or kinds != Counter({"near": N_NEAR, "far": N_FAR}):
        ck.fail(f"ood.jsonl: {len(ood)} lines, kinds {dict(kinds)} (need {N_OOD} = {N_NEAR} near + {N_FAR} far)")
    if [o.get("id") for o in ood] != [f"de-ood-{i:02d}" for i in range(1, N_OOD + 1)]:
        ck.fail(f"ood ids are not de-ood-01..de-ood-{N_OOD} in order")
    en_texts = []
    for f in EN_FILES:
        p = os.path.join(EN_CORPUS, f)
        if not os.path.isfile(p):
            ck.fail(f"English corpus file {p} missing (OOD key terms must be absent from it too)")
            continue
        en_texts.append(ws(text_of(parse(p, parser))))
    corpora = {"German": " \n ".join(ck.texts.values()), "English": " \n ".join(en_texts)}
    traps = {o.get("id") for o in ood if o.get("trap") is True}
    by_id = {o.get("id"): o for o in ood}
    for o in ood:
        oid = o.get("id")
        if not {"id", "kind", "query"} <= set(o) <= {"id", "kind", "query", "trap"}:
            ck.fail(f"{oid}: keys {sorted(o)}")
        if "trap" in o and o["trap"] is not True:
            ck.fail(f"{oid}: 'trap' must be true when present")
        if o.get("trap") and o.get("kind") != "near":
            ck.fail(f"{oid}: traps must be near-domain")
        pats = OOD_ABSENT.get(oid, [])
        if not pats:
            ck.fail(f"{oid}: no key terms registered")
        elif not any(re.search(pat, o.get("query", ""), re.I) for pat in pats):
            ck.fail(f"{oid}: none of its registered key terms is in the query")
        for pat in pats:
            for name, text in corpora.items():
                m = re.search(pat, text, re.I)
                if m:
                    ck.fail(f"{oid}: key term /{pat}/ occurs in the {name} corpus: "
                            f"...{text[max(0, m.start() - 40):m.end() + 40]}...")
    if traps != set(OOD_TRAPS):
        ck.fail(f"rows marked trap {sorted(traps)} != registered traps {sorted(OOD_TRAPS)}")
    if len(traps) < MIN_TRAPS:
        ck.fail(f"only {len(traps)} near-domain traps (need >= {MIN_TRAPS})")
    for oid, (bait, f) in OOD_TRAPS.items():
        if bait not in by_id.get(oid, {}).get("query", ""):
            ck.fail(f"{oid}: query lacks its bait phrase {bait!r}")
        if bait not in ck.texts[f]:
            ck.fail(f"{oid}: bait phrase {bait!r} not found in {f}")
    for oid, (bait, f) in OOD_NEAR_MISS.items():
        if bait.lower() not in by_id.get(oid, {}).get("query", "").lower():
            ck.fail(f"{oid}: query lacks its near-miss word {bait!r}")
        if bait.lower() not in ck.texts[f].lower():
            ck.fail(f"{oid}: near-miss word {bait!r} not found in {f}")
    print(f"  {len(ood)} queries ({kinds['near']} near incl. {len(traps)} traps, {kinds['far']} far); key terms"
          f" absent from the German and English corpora; {len(OOD_TRAPS)} trap baits and"
          f" {len(OOD_NEAR_MISS)} near-miss words present")
    return len(ood), len(traps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parser", choices=("html", "xml"), default="html",
                    help="lxml.html (default; what citerag's extractor uses) or lxml's XML parser")
    ap.add_argument("--skip-questions", action="store_true",
                    help="do not check questions.jsonl (e.g. before it is written)")
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
    if ("debian-reference-de_2.100_all.deb" not in lic_text or "License: GPL-2+" not in lic_text
            or "GNU GENERAL PUBLIC LICENSE" not in lic_text):
        pre.append("corpus/LICENSE missing or lacks the provenance / copyright file / GPL-2 text")
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

    summary = []
    if args.skip_questions:
        print("== questions.jsonl (skipped: --skip-questions)")
    else:
        nt, nq, nf = check_questions(ck)
        summary.append(f"{nt} truths / {nq} queries, needles unique and tag-free in {nf}/14 files")
    summary.append(f"{check_phrases(ck)} exact phrases")
    n_ood, n_traps = check_ood(ck, args.parser)
    summary.append(f"{n_ood} OOD queries ({n_traps} traps)")

    if ck.problems:
        print(f"FAIL: {len(ck.problems)} problem(s)")
        return 1
    print("PASS: " + ", ".join(summary) + ", corpus intact"
          + (" (questions.jsonl not checked)" if args.skip_questions else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
