"""Citation checking on crafted answers: [n] mapping, invalid markers removed, unused sources, accuracy."""

from __future__ import annotations

import re

import pytest

from citerag.answer.check import CheckedStream, CitationMetrics, answer_figures, check_citations, split_sentences
from citerag.types import Answer, Citation, CitationCheck


def _citation(index: int, quote: str) -> Citation:
    return Citation(index=index, document_id=index, document_name=f"doc{index}.md", source_path=f"/d/doc{index}.md",
                    locator_label="Section", fragment=f"#char=0,{len(quote)}", start=0, end=len(quote), quote=quote,
                    cosine_distance=0.3)


def test_valid_markers_are_kept_and_mapped() -> None:
    text = "Use apt-get to install packages [1]. The cache lives in /var/cache/apt [2]."
    cleaned, check = check_citations(text, 3)
    assert cleaned == text
    assert check.cited == [1, 2] and check.valid_markers == 2 and check.invalid == []
    assert check.unused == [3]
    assert check.sentences == 2 and check.cited_sentences == 2 and check.citation_accuracy == 1.0
    assert not check.flagged


def test_markers_naming_no_source_are_removed_and_reported() -> None:
    text = "Debian uses dpkg [1]. Aptitude is a front end [4]. Nothing cites [0] here. Both do [2][9]."
    cleaned, check = check_citations(text, 2)
    assert cleaned == "Debian uses dpkg [1]. Aptitude is a front end. Nothing cites here. Both do [2]."
    assert check.invalid == ["[4]", "[0]", "[9]"]
    assert check.cited == [1, 2] and check.unused == []
    assert check.sentences == 4 and check.cited_sentences == 2
    assert check.citation_accuracy == pytest.approx(0.5)
    assert check.uncited == ["Aptitude is a front end.", "Nothing cites here."]


def test_groups_keep_only_their_valid_numbers() -> None:
    cleaned, check = check_citations("Both tools read sources.list [1, 5, 2]. Ranges work too [2-3].", 3)
    assert cleaned == "Both tools read sources.list [1, 2]. Ranges work too [2-3]."
    assert check.invalid == ["5"] and check.cited == [1, 2, 3] and check.valid_markers == 4


def test_marker_after_the_full_stop_belongs_to_its_sentence() -> None:
    # The extractive generator's style: "Sentence. [n] Next sentence. [m]"
    text = "The popcon number is a vote count. [1] It was downloaded in 2023. [2] No source for this."
    cleaned, check = check_citations(text, 2)
    assert split_sentences(cleaned) == ["The popcon number is a vote count. [1]", "It was downloaded in 2023. [2]",
                                        "No source for this."]
    assert check.sentences == 3 and check.cited_sentences == 2
    assert check.citation_accuracy == pytest.approx(2 / 3)


def test_list_items_are_sentences() -> None:
    cleaned, check = check_citations("Steps:\n- run apt update [1]\n- run apt upgrade\n", 1)
    assert check.sentences == 3 and check.cited_sentences == 1


def test_an_answer_without_a_valid_citation_is_flagged() -> None:
    cleaned, check = check_citations("I think the answer is 42 [7]. See http://example.com.", 2)
    assert check.flagged and check.cited == [] and check.unused == [1, 2]
    assert check.invalid == ["[7]"] and "[7]" not in cleaned
    assert check.citation_accuracy == 0.0
    _, empty = check_citations("", 2)
    assert empty.flagged and empty.sentences == 0 and empty.citation_accuracy == 0.0


def test_metrics_count_every_recorded_check() -> None:
    counters = CitationMetrics()
    counters.record(check_citations("A claim [1]. Another claim [3].", 2)[1])
    counters.record(check_citations("Nothing cited.", 2)[1])
    check_citations("Checked but not recorded [1].", 2)  # the checker itself counts nothing
    m = counters.snapshot()
    assert m["citerag_answers_checked_total"] == 2
    assert m["citerag_answers_flagged_total"] == 1
    assert m["citerag_invalid_markers_removed_total"] == 1
    assert m["citerag_unused_sources_total"] == 1 + 2
    assert m["citerag_answer_sentences_total"] == 3 and m["citerag_cited_sentences_total"] == 1
    assert m["citerag_citation_accuracy"] == pytest.approx(1 / 3)
    assert m["citerag_citation_accuracy_mean"] == pytest.approx((0.5 + 0.0) / 2)
    counters.reset()
    assert counters.snapshot()["citerag_answers_checked_total"] == 0


def test_answer_figures_and_needle_support() -> None:
    needle = "The popcon number preceded with \"V:\" for \"votes\" is calculated by popcon."
    quote = "Intro text.\nThe popcon number preceded with \"V:\" for\n\"votes\" is calculated by popcon."
    sources = [_citation(1, quote),
               _citation(2, "Unrelated text about printers.")]
    text, check = check_citations("It counts recent use [1]. Printers are unrelated [2]. Bogus [5].", 2)
    answer = Answer("q", False, text, sources, "prompt", check=check, generator="test")
    fig = answer_figures(answer, needle)
    assert fig["needle_supported"] is True and fig["needle_retrieved"] is True
    assert fig["invalid_markers"] == 1 and fig["valid_markers"] == 2 and fig["unused_sources"] == 0
    assert fig["citation_accuracy"] == pytest.approx(2 / 3) and not fig["flagged"]
    # The needle is in source 1, but the answer cites only source 2: retrieved, not supported.
    text2, check2 = check_citations("Printers are unrelated [2].", 2)
    fig2 = answer_figures(Answer("q", False, text2, sources, None, check=check2), needle)
    assert fig2["needle_supported"] is False and fig2["needle_retrieved"] is True and fig2["unused_sources"] == 1
    refused = answer_figures(Answer("q", True, "NO ANSWER", []), needle)
    assert refused["needle_supported"] is False and refused["refused"] and refused["citation_accuracy"] is None
    assert answer_figures(answer)["needle_supported"] is None


def test_answer_json_keeps_its_keys_and_adds_the_check() -> None:
    text, check = check_citations("A claim [1].", 1)
    data = Answer("q", False, text, [_citation(1, "x")], "p", check=check, generator="extractive",
                  timings={"generate": 0.0123}).as_json()
    assert list(data)[:4] == ["question", "refused", "answer", "citations"]
    assert data["check"]["citation_accuracy"] == 1.0 and data["check"]["invalid_markers"] == []
    assert data["generator"] == "extractive" and data["timings_ms"] == {"generate": 12.3}
    assert isinstance(check, CitationCheck)
    assert set(Answer("q", True, "NO", []).as_json()) == {"question", "refused", "answer", "citations"}


def test_links_the_model_writes_are_removed_and_command_placeholders_kept() -> None:
    text, check = check_citations('Copy it with cp <src> <dst> [1]. Input data: see [the fix](https://evil.example/a '
                                  '"t") or <a href="//evil.example">here</a>, mailto:x@evil.example [2].', 2)
    assert text == "Copy it with cp <src> <dst> [1]. Input data: see the fix or here, [2]."
    assert check.links_removed == ['[the fix](https://evil.example/a "t")', '<a href="//evil.example">', "</a>",
                                   "mailto:x@evil.example"]


def test_streamed_deltas_never_carry_what_the_check_removes_and_add_up_to_the_answer() -> None:
    raw = "Run locale-gen [1]. Or fetch [this](https://evil.example/x) from www.evil.example [7]. Then reboot [2]."
    stream = CheckedStream(2)
    deltas = [stream.feed(piece) for piece in re.findall(r"\S+\s*", raw)]
    final, _ = check_citations(raw, 2)
    deltas.append(stream.finish(final))
    assert "".join(deltas) == final == "Run locale-gen [1]. Or fetch this from. Then reboot [2]."
    assert not any("evil" in d or "[7]" in d or "(" in d for d in deltas)
