from __future__ import annotations

import pytest

from citerag.eval.calibrate import Scored, calibrate, sweep_row

# Three answerable queries (distances per hit in rank order, ranks holding the needle), two OOD ones.
INSIDE = [Scored([0.3, 0.5], [1]), Scored([0.6, 0.4], [2]), Scored([0.7], [])]
OOD = [Scored([0.65], []), Scored([0.8, 0.9], [])]


def test_sweep_rows_by_hand() -> None:
    r = sweep_row(INSIDE, OOD, 0.55)
    assert (r.refused, r.supported, r.bluffs) == (1, 2, 0)  # the 0.7 query is refused; no OOD passes
    r = sweep_row(INSIDE, OOD, 0.68)
    assert (r.refused, r.supported, r.bluffs) == (1, 2, 1)  # the 0.65 OOD query is answered: a bluff
    r = sweep_row(INSIDE, OOD, 0.75)
    assert (r.refused, r.bluffs) == (0, 1)
    assert r.cost == pytest.approx(3 * 1 / 2 + 0 / 3)
    r = sweep_row(INSIDE, OOD, 0.2)
    assert (r.refused, r.supported, r.bluffs) == (3, 0, 0)


def test_the_gate_keeps_at_most_four_hits() -> None:
    deep = Scored([0.1, 0.1, 0.1, 0.1, 0.2], [5])
    assert sweep_row([deep], [], 0.5).supported == 0  # the needle is the fifth hit: cut by the gate
    assert sweep_row([deep], [], 0.5, max_sources=5).supported == 1
    assert sweep_row([deep], [], 0.5).refused == 0


def test_calibration_and_recommended_threshold() -> None:
    cal = calibrate(INSIDE, OOD, cost_ratio=3.0, reference_threshold=0.68)
    assert cal.worst_inside == 0.7 and cal.best_ood == 0.65
    assert sorted(cal.inside_best) == [0.3, 0.4, 0.7] and sorted(cal.ood_best) == [0.65, 0.8]
    # Costs: 3 x bluff rate + refusal rate; a refusal (1/3) beats a bluff (3/2): cut between 0.4 and 0.65.
    assert cal.recommended.threshold == 0.525
    assert (cal.recommended.refused, cal.recommended.bluffs) == (1, 0)
    assert cal.reference is not None and (cal.reference.refused, cal.reference.bluffs) == (1, 1)
    # When bluffs are cheap, answer everything answerable and accept the near OOD query.
    cheap = calibrate(INSIDE, OOD, cost_ratio=0.1)
    assert cheap.recommended.threshold == 0.75 and (cheap.recommended.refused, cheap.recommended.bluffs) == (0, 1)
    assert [r.threshold for r in cal.sweep] == sorted(r.threshold for r in cal.sweep)
    assert all(a.refused >= b.refused and a.bluffs <= b.bluffs for a, b in zip(cal.sweep, cal.sweep[1:], strict=False))


def test_no_ood_queries() -> None:
    cal = calibrate(INSIDE, [])
    assert cal.best_ood is None and cal.recommended.refused == 0
