"""Transcripts: cues joined into text, each citation a W3C media fragment over the cues it quotes."""

from __future__ import annotations

from pathlib import Path

from formats_util import check_contract, extract, find, sample

from citerag.answer.citations import clock, locate


def test_webvtt_netflix_every_cue_with_its_times() -> None:
    ext = sample("vtt-netflix-865cues.vtt")
    chunks = check_contract(ext)["E"]
    assert len(ext.locators) == 865  # NOTE blocks and the header are no cues
    first = ext.locators[0]
    assert (first.t_start, first.t_end) == (7.96, 9.48)
    assert ext.text.startswith("[Alba] En 1928,\n\nlas mujeres éramos\nalgo así como adornos")  # <i> removed
    # chunks are runs of whole cues: the fragment spans exactly the first and last cue they quote
    for c in chunks:
        cues = [loc for loc in ext.locators if loc.start < c.end and loc.end > c.start]
        assert cues[0].start == c.start and cues[-1].end == c.end
        located = locate(ext.locators, c.start, c.end)
        assert located is not None
        a, b = cues[0].t_start, cues[-1].t_end
        assert a is not None and b is not None
        assert located.fragment == f"#t={a:g},{b:g}"
        assert located.label == f"{clock(a)}–{clock(b)}"


def test_srt_cue_locator_is_exact() -> None:
    ext = sample("srt-french-film-1332cues.srt")
    check_contract(ext)
    assert len(ext.locators) == 1332
    start, end = find(ext.text, "CE FILM RELATE DES ÉVÉNEMENTS QUI ONT EXISTÉ.")
    located = locate(ext.locators, start, end)
    assert located is not None
    assert located.fragment == "#t=27.074,30.566" and located.label == "00:27–00:30"
    last = ext.locators[-1]
    assert last.t_start is not None and last.t_start > 3600
    assert clock(last.t_start).count(":") == 2  # h:mm:ss past the hour


def test_youtube_rolling_captions_styling_and_inline_timestamps() -> None:
    ext = sample("vtt-youtube-dl.vtt")
    check_contract(ext)
    assert ext.text == "yeah\n\nwhat\n\nthis will happen is I'm telling"
    located = locate(ext.locators, 0, len(ext.text))
    assert located is not None and located.fragment == "#t=286.07,305.069" and located.label == "04:46–05:05"


def test_small_srt_without_blank_line_before_next_timing(tmp_path: Path) -> None:
    data = "1\n00:00:01,500 --> 00:00:03,000\n<i>Hello</i> &amp; welcome\n\n2\n00:01:02,000 --> 00:01:04,250\nBye\n"
    ext = extract(tmp_path / "t.srt", data.encode())
    assert ext.text == "Hello & welcome\n\nBye"
    located = locate(ext.locators, 0, len(ext.text))
    assert located is not None and located.fragment == "#t=1.5,64.25" and located.label == "00:01–01:04"
