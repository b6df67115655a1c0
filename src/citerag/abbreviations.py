"""Where a full stop does not end a sentence: German abbreviations ("z. B.", "d. h.", "bzw.", "ca.", "Nr.").

The sentence rules (the chunkers' fallback in chunk/boundaries.py, the citation check's in answer/check.py) cut
after every "." followed by whitespace, which is the published reference's rule and stays so for every language
but German, so that chunks stay conformant to the reference on its inputs. For German text (`language="de"`) a
cut is skipped when `continues` says the stop belongs to an abbreviation:

- a stop not followed by whitespace ("z.B.", "2.6", "debian.org") ends nothing;
- abbreviations that never end a sentence ("bzw.", "ca.", "vgl.", "Nr.", "Abb.", "ggf.", "evtl.", "inkl.", ...)
  and two-letter ones ("z. B.", "d. h.", "z. T.", "u. U.", "i. d. R.") never cut; their first letter neither;
- abbreviations that may close a sentence ("usw.", "etc.", "u. a.", "s. o.", "o. Ä.") cut only when the next word
  begins with an upper-case letter (German sentences do; after "usw." a lower-case word continues the sentence);
- a lone single letter (an initial, "s." for "siehe") continues unless an upper-case word follows an upper-case
  letter ("Anhang A. Dort ..."); a bare number at a paragraph's start ("1.") is a list label, not a sentence.

A hand-written list rather than a library: the sentence splitters that know German abbreviations (NLTK's punkt
models, spaCy, syntok) either need data downloads, bring a pipeline per language, or segment differently from the
reference's rule everywhere else; this changes only the cuts after abbreviations.
"""

from __future__ import annotations

import re

# Lower-cased, without the stop.
_NEVER_FINAL = frozenset({
    "bzw", "ca", "vgl", "nr", "abb", "ggf", "evtl", "inkl", "exkl", "bspw", "sog", "tab", "kap", "zzgl", "dr",
    "prof", "hr", "hrsg", "bd", "jh", "ggü", "gem", "lt", "insb", "allg", "einschl", "ehem", "urspr", "zit",
    "zb", "dh", "ua", "uu", "zt", "idr", "iw", "ia", "od", "bsp", "anm", "st", "akt", "betr", "gg",
})
_NEVER_FINAL_PAIRS = frozenset({"zb", "dh", "zt", "uu", "id", "dr", "iw", "ia", "md", "ie", "vs"})
_MAYBE_FINAL = frozenset({"usw", "etc", "ff", "uvm", "uäm", "oä", "uä"})
_MAYBE_FINAL_PAIRS = frozenset({"ua", "so", "su", "oä", "uä", "vm"})

_LAST_WORD = re.compile(r"(?<![^\W\d_])([^\W\d_]+)\.$")
_PAIR = re.compile(r"(?<![^\W\d_])([^\W\d_])\.\s*([^\W\d_])\.$")
_LIST_LABEL = re.compile(r"^\s*\d{1,3}\.$")
_NEXT_WORD = re.compile(r"^\s*[\"'„“(\[]*(\S)")
_NEXT_LETTER_STOP = re.compile(r"^\s*[^\W\d_]\.")


def continues(before: str, after: str, language: str | None) -> bool:
    """Whether a sentence rule should not cut between `before` (which ends at its "." run) and `after` (the rest
    of the paragraph, whitespace first); always False unless `language` is "de"."""
    if language != "de" or not before.endswith(".") or before.endswith(".."):
        return False
    if not after.strip():
        return False
    if not after[0].isspace():
        return True
    nxt = _NEXT_WORD.match(after)
    next_upper = bool(nxt and nxt.group(1).isupper())
    if _LIST_LABEL.match(before):
        return True
    pair = _PAIR.search(before)
    if pair:
        key = (pair.group(1) + pair.group(2)).casefold()
        if key in _NEVER_FINAL_PAIRS:
            return True
        if key in _MAYBE_FINAL_PAIRS:
            return not next_upper
    word = _LAST_WORD.search(before)
    if word is None:
        return False
    key = word.group(1).casefold()
    if key in _NEVER_FINAL:
        return True
    if key in _MAYBE_FINAL:
        return not next_upper
    if len(key) == 1:
        if _NEXT_LETTER_STOP.match(after):  # the first half of "z. B.", "d. h.", "u. a."
            return True
        return not (word.group(1).isupper() and next_upper)
    return False
