"""Labelling's sample is stratified over time (a busy day does not crowd out the rest of the month), prefers answers
whose feedback named the right source, and a pasted needle is found in its passage whatever its spacing."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from citerag.app.labels import Passage, find_span, stratified
from citerag.trace import OPERATION

START = datetime(2026, 11, 1, tzinfo=UTC)


def answer(i: int, when: datetime, named: bool = False) -> dict[str, Any]:
    return {"trace_id": f"{i:032x}", "question": f"question {i}", "text_kept": True,
            "spans": [{"name": "citerag.ask", "start": when.isoformat(), "attributes": {OPERATION: "ask"}}],
            **({"feedback": [{"helpful": False, "source": 2}]} if named else {})}


def test_a_busy_day_does_not_crowd_out_the_month() -> None:
    busy = [answer(i, START + timedelta(minutes=i)) for i in range(40)]  # 40 questions on the first day
    month = [answer(100 + d, START + timedelta(days=d)) for d in range(3, 30, 3)]  # one every three days
    chosen = stratified(busy + month, 5, random.Random(0))
    days = sorted((datetime.fromisoformat(r["spans"][0]["start"]) - START).days for r in chosen)
    assert len(chosen) == 5 and len({r["trace_id"] for r in chosen}) == 5
    assert sum(d == 0 for d in days) <= 1, days  # a uniform sample would take about four of five from day one
    assert [d // 6 for d in days] == [0, 1, 2, 3, 4], days  # one from each sixth of the 27 days
    assert stratified(month[:3], 5, random.Random(0)) == month[:3]  # fewer than asked: all of them


def test_an_answer_whose_feedback_named_a_source_is_chosen_in_its_window() -> None:
    window = [answer(i, START + timedelta(hours=i)) for i in range(10)]
    window[7] = answer(7, START + timedelta(hours=7), named=True)
    later = [answer(50, START + timedelta(days=20))]
    for seed in range(5):
        chosen = stratified(window + later, 2, random.Random(seed))
        assert {r["trace_id"] for r in chosen} == {f"{7:032x}", f"{50:032x}"}
    # A window left empty is filled from the rest: still as many as asked.
    assert len(stratified(window + later, 4, random.Random(0))) == 4


def test_a_pasted_needle_is_found_in_its_passage() -> None:
    text = "The root shell of the system is now\naccessible without  password.\n\nNote"
    passage = Passage(1, 3, "ch04.en.html", "4.6.4", 1000, 1000 + len(text), text, 2)
    assert find_span(passage, "is now\naccessible") == (1000 + text.index("is now"), 1000 + text.index("is now") + 17)
    start, end = find_span(passage, "  now accessible   without password. ") or (0, 0)
    assert text[start - 1000:end - 1000] == "now\naccessible without  password."
    assert find_span(passage, "with a password") is None and find_span(passage, "   ") is None
