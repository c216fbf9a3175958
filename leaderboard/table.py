"""The numbers of a leaderboard table, before formatting: per-cell statistics (mean,
95% CI, paired test against the column's best), row averages, row costs and the Pareto
front. Used by the markdown renderer and by the CSV/JSON export alike."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from fedbench.leaderboard.groups import RowKey, Section, weak_strong_tiers
from fedbench.leaderboard.stats import PairedTest, ci_half_width, mean, paired_t_test, pareto_front

__all__ = ["COSTS", "CellStat", "QualityTable", "quality_table", "row_costs", "pareto_rows"]


@dataclass(frozen=True)
class CellStat:
    n: int  # seeds
    mean: float
    half: float | None  # 95% CI half-width (n >= 2)
    best: bool  # best (as displayed) in its column; ties are all best
    test: PairedTest | None  # paired test of this cell minus the column's best (None: not tested)
    behind: bool  # significantly behind the column's best


@dataclass
class QualityTable:
    rows: list[RowKey]
    columns: list[str]
    cells: dict  # (RowKey, column) -> CellStat
    avgs: dict  # RowKey -> mean of the row's cell means (rows with every column)
    best_avg: frozenset  # the RowKeys whose Avg is their cohort's best (as displayed; ties all)


#: run-config fields that define the federation (who trains what on which data): rows that
#: differ in them answer different questions and are not ranked against each other
FEDERATION_FIELDS = frozenset({"clients", "per_round", "tier_fractions", "tier_ranks", "dynamic", "local_split",
                               "server_holdout"})


def cohort(rk: RowKey) -> tuple:
    """Rows ranked against each other (bold best, paired test): the same resource label,
    federation (:data:`FEDERATION_FIELDS`) and task config, as the papers' tables compare
    methods within one resource ratio and federation. Methods and their hyperparameters
    (method config, lr, rounds, ...) are compared within a cohort."""
    return (rk.label,) + tuple((k, v) for k, v in rk.variant if k in FEDERATION_FIELDS or k.startswith("task."))


def quality_table(rows: Sequence[RowKey], columns: Sequence[str], values: dict, *, lower_better: bool,
                  key: Callable[[float], float]) -> QualityTable:
    """Statistics of ``values`` ((row, column) -> {seed: value}). ``key`` maps a value to
    what is displayed (for ties). A column's best row, within each :func:`cohort`, is the
    first row, in row order, whose displayed mean is best; every other cell of the cohort
    with >= 2 seeds shared with it gets a paired t-test
    (:func:`~fedbench.leaderboard.stats.paired_t_test`)."""
    pick = min if lower_better else max
    means = {k: mean([v[s] for s in sorted(v)]) for k, v in values.items() if v}
    cells = {}
    for c, group in ((c, g) for c in columns for g in sorted({cohort(rk) for rk in rows})):
        present = [rk for rk in rows if (rk, c) in means and cohort(rk) == group]
        if not present:
            continue
        best_key = pick(key(means[(rk, c)]) for rk in present)
        best_row = next(rk for rk in present if key(means[(rk, c)]) == best_key)
        for rk in present:
            v = values[(rk, c)]
            vals = [v[s] for s in sorted(v)]
            is_best = key(means[(rk, c)]) == best_key
            test = None if rk == best_row else paired_t_test(v, values[(best_row, c)])
            behind = bool(test and test.significant and not is_best
                          and (test.mean_diff > 0 if lower_better else test.mean_diff < 0))
            cells[(rk, c)] = CellStat(len(vals), means[(rk, c)], ci_half_width(vals) if len(vals) > 1 else None,
                                      is_best, test, behind)
    avgs = {}
    for rk in rows:
        m = [means[(rk, c)] for c in columns if (rk, c) in means]
        if columns and len(m) == len(columns):
            avgs[rk] = mean(m)
    best_avg = set()
    for group in {cohort(rk) for rk in avgs}:
        members = [rk for rk in avgs if cohort(rk) == group]
        top = pick(key(avgs[rk]) for rk in members)
        best_avg.update(rk for rk in members if key(avgs[rk]) == top)
    return QualityTable(list(rows), list(columns), cells, avgs, frozenset(best_avg))


def _get(node, path: Sequence[str]) -> float | None:
    for k in path:
        node = node.get(k) if isinstance(node, dict) else None
    return node if isinstance(node, (int, float)) and not isinstance(node, bool) and math.isfinite(node) else None


def _tier(which: int, metric: tuple[str, str]) -> Callable[[dict], float | None]:
    def value(rec: dict) -> float | None:
        tier = weak_strong_tiers(rec)[which]
        return _get(rec["cost"], (metric[0], "by_tier", tier, metric[1]))
    return value


def _path(*path: str) -> Callable[[dict], float | None]:
    return lambda rec: _get(rec["cost"], path)


#: (column name, how to read it from a record, format kind). ``weak`` / ``strong``: the
#: run's weakest / strongest tier (:func:`~fedbench.leaderboard.groups.weak_strong_tiers`).
COSTS = (
    ("TFLOPs/step", _path("tflops_per_step", "mean"), "sig4"),
    ("TFLOPs/step weak", _tier(0, ("tflops_per_step", "mean")), "sig4"),
    ("TFLOPs/step strong", _tier(1, ("tflops_per_step", "mean")), "sig4"),
    ("Mem", _path("peak_mem_gb", "mean"), "mem"),
    ("Mem weak", _tier(0, ("peak_mem_gb", "mean")), "mem"),
    ("Mem strong", _tier(1, ("peak_mem_gb", "mean")), "mem"),
    ("MB/round", _path("traffic_mb_per_client_round", "total"), "fix2"),
    ("MB/round weak", _tier(0, ("traffic_mb_per_client_round", "total")), "fix2"),
    ("MB/round strong", _tier(1, ("traffic_mb_per_client_round", "total")), "fix2"),
    ("s/round", _path("seconds_per_round"), "fix2"),
    ("Eval s/round", _path("eval_seconds_per_round"), "fix2"),
    ("Server TFLOPs", _path("server_tflops_total"), "sig4"),
    ("Server s", _path("server_seconds_total"), "fix2"),
)


def row_costs(sec: Section) -> dict[RowKey, dict[str, float | None]]:
    """Each cost column's mean over all of a row's runs (every setting and seed; nulls and
    runs whose tier did not train are left out); None when no run has the value."""
    out = {}
    for rk in sec.rows:
        out[rk] = {}
        for name, read, _ in COSTS:
            vals = [v for v in (read(r) for r in sec.runs[rk]) if v is not None]
            out[rk][name] = mean(vals) if vals else None
    return out


def pareto_rows(q: QualityTable, costs: dict, *, lower_better: bool) -> set[RowKey]:
    """Rows no other row dominates on (Avg, weakest tier's TFLOPs/step); rows missing
    either are not considered."""
    points = {rk: (q.avgs[rk], costs[rk]["TFLOPs/step weak"]) for rk in q.rows
              if rk in q.avgs and costs[rk]["TFLOPs/step weak"] is not None}
    return pareto_front(points, higher_quality_better=not lower_better)
