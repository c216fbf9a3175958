"""The numbers of a leaderboard table, before formatting: per-cell statistics (mean,
95% CI, paired test against the column's best), row averages, row costs and the Pareto
front. Used by the markdown renderer and by the CSV/JSON export alike."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from fedbench.leaderboard.groups import RowKey, Section, show_value, weak_strong_tiers
from fedbench.leaderboard.stats import PairedTest, ci_half_width, mean, paired_t_test, pareto_front

__all__ = ["BUDGET_FIELDS", "COHORT_FIELDS", "COSTS", "FEDERATION_FIELDS", "PARETO_COST", "CellStat", "Cost",
           "QualityTable", "budget", "budget_names", "cohort", "cohort_names", "idle_weak_tier", "mem_sources",
           "pareto_rows", "ranked", "value_key", "weak_tier_idle",
           "quality_table", "row_costs"]


@dataclass(frozen=True)
class CellStat:
    n: int  # seeds
    mean: float
    half: float | None  # 95% CI half-width (n >= 2)
    best: bool  # best (as displayed) in its column; ties are all best
    test: PairedTest | None  # paired test of this cell minus the column's best (None: not tested)
    behind: bool  # significantly behind the column's best
    # best cells: whether the runner-up's mean lies outside this cell's 95% CI (False with one
    # seed: no CI); None for other cells and for the only row of its cohort in the column
    clear: bool | None = None


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
#: run fields that set a cohort apart besides the federation: the training budget (a 50-round
#: run is not ranked against, nor paired with, a 10-round run of another method)
BUDGET_FIELDS = frozenset({"rounds"})
COHORT_FIELDS = FEDERATION_FIELDS | BUDGET_FIELDS


def cohort(rk: RowKey) -> tuple:
    """Rows ranked against each other (bold best, paired test): the same resource label,
    federation (:data:`FEDERATION_FIELDS`), budget (:data:`BUDGET_FIELDS`: rounds) and task
    config, as the papers' tables compare methods within one resource ratio, federation and
    budget. Methods and their hyperparameters (method config, lr, ...) are compared within a
    cohort."""
    return (rk.label,) + tuple((k, v) for k, v in rk.variant if k in COHORT_FIELDS or k.startswith("task."))


def budget(rk: RowKey) -> tuple:
    """The row's budget: its :func:`cohort` without the resource label (federation, rounds,
    task config). A table holds the rows of one budget; within it, each resource label is a
    group ranked on its own."""
    return cohort(rk)[1:]


def value_key(canon: str) -> tuple:
    """Sort key of a variant value (canonical JSON): none first, then numbers by value, then text."""
    v = json.loads(canon)
    if v is None:
        return (0, 0.0, "")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (1, float(v), "")
    return (2, 0.0, canon)


def _order(fields: tuple) -> list:
    """Sort key of ((field, canonical JSON value), ...): by each field's value, numbers by size."""
    return [(k, value_key(v)) for k, v in fields]


def _differing(groups: Sequence[tuple]) -> dict[tuple, str]:
    """Each of ``groups`` (tuples of (field, canonical JSON value)) -> the fields that differ
    between them, ``rounds=50, clients=10`` (``""`` when none differs)."""
    fields = sorted({k for g in groups for k, _ in g})
    differ = [k for k in fields if len({dict(g).get(k) for g in groups}) > 1]
    return {g: ", ".join(f"{k}={show_value(dict(g)[k]) if k in dict(g) else '-'}" for k in differ) for g in groups}


def budget_names(rows: Sequence[RowKey]) -> dict[tuple, str]:
    """Budget -> its name: the fields that differ between the budgets of ``rows``
    (``rounds=50``, ``clients=10, per_round=10, rounds=70``); ``""`` when all rows share one.
    In table order: by each field's value, numbers by size (``rounds=10`` before ``rounds=250``)."""
    return _differing(sorted({budget(rk) for rk in rows}, key=_order))


def ranked(q: QualityTable, rows: Sequence[RowKey], *, lower_better: bool) -> list[RowKey]:
    """``rows`` (of one group) best first: by Avg, then the rows without an Avg (a setting
    missing) by the mean of the cells they have; ties in the given order."""
    sign = 1.0 if lower_better else -1.0

    def key(rk: RowKey) -> tuple:
        if rk in q.avgs:
            return 0, sign * q.avgs[rk]
        means = [q.cells[(rk, c)].mean for c in q.columns if (rk, c) in q.cells]
        return 1, sign * mean(means) if means else math.inf

    return sorted(rows, key=key)


def cohort_names(rows: Sequence[RowKey]) -> dict[tuple, str]:
    """Cohort -> its name in the plots: ``RoC <label>`` and the federation, budget or task
    fields that differ between the cohorts of ``rows`` (``RoC -, clients=10, rounds=70``); in
    order: by label, then by each field's value (numbers by size)."""
    groups = sorted({cohort(rk) for rk in rows}, key=lambda g: (g[0], _order(g[1:])))
    rest = _differing([g[1:] for g in groups])
    return {g: ", ".join([f"RoC {g[0]}"] + ([rest[g[1:]]] if rest[g[1:]] else [])) for g in groups}


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
        others = [means[(rk, c)] for rk in present if key(means[(rk, c)]) != best_key]
        runner_up = pick(others) if others else None
        for rk in present:
            v = values[(rk, c)]
            vals = [v[s] for s in sorted(v)]
            is_best = key(means[(rk, c)]) == best_key
            test = None if rk == best_row else paired_t_test(v, values[(best_row, c)])
            behind = bool(test and test.significant and not is_best
                          and (test.mean_diff > 0 if lower_better else test.mean_diff < 0))
            half = ci_half_width(vals) if len(vals) > 1 else None
            clear = None
            if is_best and runner_up is not None:
                clear = half is not None and abs(means[(rk, c)] - runner_up) > half
            cells[(rk, c)] = CellStat(len(vals), means[(rk, c)], half, is_best, test, behind, clear)
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


@dataclass(frozen=True)
class Cost:
    """One cost column: its header, its export field (the unit in the name, as in the
    record), how to read it from a record and its unit (``tflops``, ``gb``, ``mb``, ``s``)."""

    name: str
    key: str
    read: Callable[[dict], float | None]
    unit: str


def _three(name: str, key: str, field: tuple[str, str], unit: str) -> tuple[Cost, ...]:
    """A cost over all clients and for the weakest / strongest tier of each run."""
    return (Cost(name, key, _path(*field), unit), Cost(f"{name} weak", f"{key}_weak", _tier(0, field), unit),
            Cost(f"{name} strong", f"{key}_strong", _tier(1, field), unit))


#: The cost columns. ``weak`` / ``strong``: the run's weakest / strongest tier
#: (:func:`~fedbench.leaderboard.groups.weak_strong_tiers`).
COSTS = (
    *_three("TFLOPs/step", "tflops_per_step", ("tflops_per_step", "mean"), "tflops"),
    *_three("Mem", "peak_mem_gb", ("peak_mem_gb", "mean"), "gb"),
    *_three("Traffic/round", "traffic_mb_per_client_round", ("traffic_mb_per_client_round", "total"), "mb"),
    Cost("s/round", "seconds_per_round", _path("seconds_per_round"), "s"),
    Cost("Eval s/round", "eval_seconds_per_round", _path("eval_seconds_per_round"), "s"),
    Cost("Server TFLOPs", "server_tflops_total", _path("server_tflops_total"), "tflops"),
    Cost("Server s", "server_seconds_total", _path("server_seconds_total"), "s"),
)
#: The cost the table's Pareto front is taken on (with the quality Avg).
PARETO_COST = "TFLOPs/step weak"


def row_costs(sec: Section) -> dict[RowKey, dict[str, float | None]]:
    """Each cost column's mean over all of a row's runs (every setting and seed; nulls and
    runs whose tier did not train are left out); None when no run has the value."""
    out = {}
    for rk in sec.rows:
        out[rk] = {}
        for cost in COSTS:
            vals = [v for v in (cost.read(r) for r in sec.runs[rk]) if v is not None]
            out[rk][cost.name] = mean(vals) if vals else None
    return out


def mem_sources(sec: Section) -> dict[RowKey, str]:
    """Row -> ``cost.peak_mem_source`` of its runs (``cuda`` or ``accounted``), or
    ``mixed`` when its runs differ."""
    out = {}
    for rk in sec.rows:
        found = sorted({r["cost"]["peak_mem_source"] for r in sec.runs[rk]})
        out[rk] = found[0] if len(found) == 1 else "mixed"
    return out


def weak_tier_idle(rec: dict) -> bool:
    """Whether the run's weakest tier never trained: FLOPs were measured per tier
    (``cost.tflops_per_step.by_tier`` not empty) but none for the weakest tier (e.g.
    Exclusive: clients below full capacity sit out, so they cost and send nothing)."""
    by_tier = rec["cost"]["tflops_per_step"]["by_tier"]
    return bool(by_tier) and weak_strong_tiers(rec)[0] not in by_tier


def idle_weak_tier(sec: Section) -> set[RowKey]:
    """Rows with a run whose weakest tier never trained (:func:`weak_tier_idle`): they have
    no weakest-tier cost to be ranked by and are left out of the Pareto front."""
    return {rk for rk in sec.rows if any(weak_tier_idle(r) for r in sec.runs[rk])}


def pareto_rows(q: QualityTable, costs: dict, *, lower_better: bool) -> set[RowKey]:
    """Rows no other row of their :func:`cohort` dominates on (Avg, weakest tier's
    TFLOPs/step); rows missing either are not considered."""
    points = {rk: (q.avgs[rk], costs[rk][PARETO_COST]) for rk in q.rows
              if rk in q.avgs and costs[rk][PARETO_COST] is not None}
    front = set()
    for group in sorted({cohort(rk) for rk in points}):
        front |= pareto_front({rk: p for rk, p in points.items() if cohort(rk) == group},
                              higher_quality_better=not lower_better)
    return front
