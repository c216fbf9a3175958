"""Pure statistics of the leaderboard, checked against hand computations."""

from __future__ import annotations

import math

import pytest

from fedbench.leaderboard import stats
from fedbench.leaderboard.stats import ci_half_width, paired_t_test, pareto_front, t_quantile_975


def test_t_quantiles_match_the_table():
    for df, q in enumerate(stats.T975, 1):
        assert t_quantile_975(df) == pytest.approx(q, abs=6e-4)
    assert t_quantile_975(1000) == pytest.approx(1.96, abs=3e-3)
    assert stats._table_quantile(31) == 1.96


def test_ci_half_width_by_hand():
    # [80, 85]: s = 3.5355, t(0.975, 1) = 12.706 -> 12.706 * 3.5355 / sqrt(2) = 31.77
    assert ci_half_width([80.0, 85.0]) == pytest.approx(31.765, abs=1e-3)
    # [1, 2, 3]: s = 1, t(0.975, 2) = 4.303 -> 4.303 / sqrt(3) = 2.484
    assert ci_half_width([1.0, 2.0, 3.0]) == pytest.approx(2.484, abs=1e-3)
    with pytest.raises(ValueError):
        ci_half_width([1.0])


def test_paired_t_test_by_hand():
    best = {0: 82.0, 1: 88.0, 2: 91.0, 7: 50.0}
    # d = -2, -3, -1 over the shared seeds 0, 1, 2: mean -2, s 1, t = -2 / (1 / sqrt 3) = -3.464 < 4.303
    r = paired_t_test({0: 80.0, 1: 85.0, 2: 90.0}, best)
    assert (r.n, r.mean_diff) == (3, -2.0) and r.t == pytest.approx(-2 * math.sqrt(3)) and not r.significant
    # d = -2, -3, -2.5: mean -2.5, s 0.5, t = -2.5 / (0.5 / sqrt 3) = -8.660 > 4.303 -> significant
    r = paired_t_test({0: 80.0, 1: 85.0, 2: 88.5}, best)
    assert r.mean_diff == -2.5 and r.t == pytest.approx(-8.660, abs=1e-3) and r.significant
    # a constant non-zero difference is significant; identical values are not
    assert paired_t_test({0: 1.0, 1: 2.0}, {0: 2.0, 1: 3.0}).significant
    assert not paired_t_test({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0}).significant
    # fewer than two shared seeds: not tested
    assert paired_t_test({0: 1.0, 5: 2.0}, {0: 2.0, 1: 3.0}) is None


def test_paired_t_test_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    a = {0: 0.71, 1: 0.69, 2: 0.74, 3: 0.70, 4: 0.72}
    b = {0: 0.73, 1: 0.72, 2: 0.75, 3: 0.74, 4: 0.73}
    ref = scipy_stats.ttest_rel([a[s] for s in range(5)], [b[s] for s in range(5)])
    r = paired_t_test(a, b)
    assert r.t == pytest.approx(ref.statistic) and r.significant == (ref.pvalue < 0.05)
    assert stats.two_sided_p(r.t, r.n - 1) == pytest.approx(ref.pvalue)
    # a constant difference (t = inf) has p = 0; t = 0 has p = 1
    assert stats.two_sided_p(math.inf, 2) == 0.0 and stats.two_sided_p(0.0, 2) == pytest.approx(1.0)


def test_pareto_front():
    pts = {"a": (80.0, 1.0), "b": (70.0, 0.5), "c": (70.0, 1.0), "d": (80.0, 1.0), "e": (60.0, 0.5)}
    # c is dominated by a and b; e by b; a and d tie (neither strictly better) so both stay.
    assert pareto_front(pts) == {"a", "b", "d"}
    # lower quality is better: e dominates b and c
    assert pareto_front({"b": (70.0, 0.5), "c": (70.0, 1.0), "e": (60.0, 0.5)}, higher_quality_better=False) == {"e"}
