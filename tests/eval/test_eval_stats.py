from __future__ import annotations

import pytest

from citerag.eval.stats import sign_test, wilson


@pytest.mark.parametrize(("k", "n", "low", "high"), [(38, 64, 0.471, 0.705), (53, 64, 0.718, 0.901)])
def test_wilson_reproduces_the_chapter(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson(k, n)
    assert (round(lo, 3), round(hi, 3)) == (low, high)


@pytest.mark.parametrize(("wins", "losses", "p", "digits"), [
    (18, 3, 0.0015, 4), (12, 2, 0.0129, 4), (8, 6, 0.79, 2), (9, 7, 0.80, 2), (10, 3, 0.09, 2), (10, 6, 0.45, 2)])
def test_sign_test_reproduces_the_chapter(wins: int, losses: int, p: float, digits: int) -> None:
    assert round(sign_test(wins, losses), digits) == p
    assert sign_test(losses, wins) == sign_test(wins, losses)  # two-sided


def test_edges() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0.25 < hi < 0.35
    lo, hi = wilson(10, 10)
    assert hi == pytest.approx(1.0) and 0.65 < lo < 0.75
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 0) == pytest.approx(2 / 32)
    with pytest.raises(ValueError):
        wilson(11, 10)
