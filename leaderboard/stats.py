"""Pure statistics for the leaderboard: means, 95% confidence intervals, the paired
significance test against a column's best, and the Pareto front.

Only the standard library is required; with scipy installed the t quantiles come from
``scipy.stats.t.ppf``, otherwise from :data:`T975` (df 1..30, then the normal 1.96).
Sums use :func:`math.fsum`, so results do not depend on the order of the inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = [
    "T975",
    "PairedTest",
    "ci_half_width",
    "mean",
    "paired_t_test",
    "pareto_front",
    "sample_std",
    "t_quantile_975",
    "two_sided_p",
]

#: Two-sided 95% (upper 0.975) quantiles of Student's t for df = 1..30.
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def sample_std(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); needs at least two values."""
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def _table_quantile(df: int) -> float:
    return T975[df - 1] if df <= len(T975) else 1.96


def t_quantile_975(df: int) -> float:
    """Upper 0.975 quantile of Student's t with ``df`` degrees of freedom (df >= 1),
    rounded to 6 decimals so output does not depend on the scipy version."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    try:
        from scipy.stats import t as student_t
    except ImportError:  # pragma: no cover - scipy comes with scikit-learn
        return _table_quantile(df)
    return round(float(student_t.ppf(0.975, df)), 6)


def ci_half_width(values: Sequence[float]) -> float:
    """Half-width of the t-based 95% confidence interval of the mean:
    ``t_{0.975, n-1} * s / sqrt(n)``; needs at least two values."""
    n = len(values)
    if n < 2:
        raise ValueError("a confidence interval needs at least two values")
    return t_quantile_975(n - 1) * sample_std(values) / math.sqrt(n)


@dataclass(frozen=True)
class PairedTest:
    """Two-sided paired t-test at the 5% level of ``a - b`` over ``n`` shared seeds."""

    n: int
    mean_diff: float  # mean of a[s] - b[s]
    t: float  # +-inf when every difference is the same non-zero value; 0 when all are 0
    significant: bool  # |t| > t_{0.975, n-1}


def paired_t_test(a: Mapping[int, float], b: Mapping[int, float]) -> PairedTest | None:
    """Paired t-test of ``a`` against ``b`` over the seeds (keys) the two share.

    Returns ``None`` with fewer than two shared seeds (the test is undefined). The
    statistic is ``t = mean(d) / (s_d / sqrt(n))`` with ``d = a[s] - b[s]``, and the
    difference is significant when ``|t|`` exceeds the two-sided 95% quantile with
    ``n - 1`` degrees of freedom.
    """
    seeds = sorted(set(a) & set(b))
    n = len(seeds)
    if n < 2:
        return None
    d = [a[s] - b[s] for s in seeds]
    md = mean(d)
    sd = sample_std(d)
    if sd == 0:
        t = 0.0 if md == 0 else math.copysign(math.inf, md)
    else:
        t = md / (sd / math.sqrt(n))
    return PairedTest(n=n, mean_diff=md, t=t, significant=abs(t) > t_quantile_975(n - 1))


def two_sided_p(t: float, df: int) -> float | None:
    """Two-sided p-value of Student's t statistic ``t`` with ``df`` degrees of freedom,
    ``2 * P(T > |t|)``; None without scipy (the quantile table gives no p-values)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    try:
        from scipy.stats import t as student_t
    except ImportError:  # pragma: no cover - scipy comes with scikit-learn
        return None
    return float(2 * student_t.sf(abs(t), df))


def pareto_front(points: Mapping, *, higher_quality_better: bool = True) -> set:
    """Keys of ``points`` ({key: (quality, cost)}) that no other point dominates: no other
    point is at least as good on both quality and cost (lower cost is better) and strictly
    better on one of them."""
    sign = 1.0 if higher_quality_better else -1.0
    front = set()
    for k, (q, c) in points.items():
        dominated = any(
            sign * q2 >= sign * q and c2 <= c and (sign * q2 > sign * q or c2 < c)
            for k2, (q2, c2) in points.items() if k2 != k
        )
        if not dominated:
            front.add(k)
    return front
