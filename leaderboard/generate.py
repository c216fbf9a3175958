"""Markdown leaderboards from result records (``fedbench leaderboard``).

One file per task, ``<out_dir>/<task>.md``, in the shape of the Fed-HeLLo main-results
tables (Tables II-VI): one row per (method, resource label), one quality column per data
setting, their average, then cost columns.

Rules (all deterministic: the same records in any order give byte-identical markdown):

* Only records with ``status == "ok"`` count; the notes say how many were skipped.
* Records of a task that use different ``results.metric_name`` get one table each.
* Rows: one per (``run.method``, ``run.resource_label``), sorted by method key, then label
  (an empty label shows as ``-``).
* Setting columns: ``iid`` first, then the other settings sorted as strings.
* Quality cell: ``results.final``; x100 with 2 decimals for the metrics in
  :data:`PERCENT_METRICS`, else 4 significant digits. Several runs in one cell (seeds)
  show ``mean ± std`` with the *sample* standard deviation (ddof=1).
* ``Avg``: mean of the row's setting-cell means; ``-`` when the row lacks a setting.
* Best value per setting column and in ``Avg`` is bold (compared as displayed, so ties
  are all bold); lower is better only for the metrics in :data:`LOWER_IS_BETTER`.
* Cost columns, each the mean over every run of the row (all settings and seeds, nulls
  ignored): ``TFLOPs/step`` = ``cost.tflops_per_step.mean`` (4 significant digits,
  ``3.2e-05`` style for tiny models), ``Mem GB`` = ``cost.peak_mem_gb.mean``,
  ``MB/round`` = ``cost.traffic_mb_per_client_round.total``, ``s/round`` =
  ``cost.seconds_per_round`` (2 decimals).
* Settings whose runs report ``results.per_domain`` get a "Per-domain (<setting>)" table:
  one column per domain (sorted) plus their ``Avg``, same cell rules.

Sums use :func:`math.fsum` (exactly rounded), so the numbers do not depend on record order.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from fedbench.runners.records import atomic_write_text, load_records, validate_record

log = logging.getLogger(__name__)

__all__ = [
    "COST_COLUMNS",
    "LOWER_IS_BETTER",
    "PERCENT_METRICS",
    "generate",
    "render_task",
    "setting_sort_key",
]

#: Metrics in [0, 1] shown as percent.
PERCENT_METRICS = frozenset({"top1", "top5", "accuracy", "macro_f1", "micro_f1", "rouge_l", "rouge1", "rouge2"})
#: Metrics where smaller is better (everything else: larger is better).
LOWER_IS_BETTER = frozenset({"loss", "perplexity", "ppl", "error", "wer", "cer"})
#: (column header, path into the record's ``cost``, format).
COST_COLUMNS = (
    ("TFLOPs/step", ("tflops_per_step", "mean"), "sig4"),
    ("Mem GB", ("peak_mem_gb", "mean"), "fix2"),
    ("MB/round", ("traffic_mb_per_client_round", "total"), "fix2"),
    ("s/round", ("seconds_per_round",), "fix2"),
)

_SAFE_TASK = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_DASH = "-"


def setting_sort_key(setting: str) -> tuple[int, str]:
    """Column order of data settings: ``iid`` first, then the rest sorted as strings."""
    return (0, "") if setting == "iid" else (1, setting)


# --------------------------------------------------------------------------- numbers


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _std(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); needs at least two values."""
    m = _mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


class _Fmt:
    """How a metric is displayed: scale and number format."""

    def __init__(self, metric: str):
        self.percent = metric in PERCENT_METRICS
        self.scale = 100.0 if self.percent else 1.0
        self.lower_better = metric in LOWER_IS_BETTER

    def num(self, v: float) -> str:
        s = f"{v:.2f}" if self.percent else f"{v:.4g}"
        return _no_neg_zero(s)

    def key(self, v: float) -> float:
        """The value as displayed, for finding (tied) bests."""
        return float(self.num(v))


def _no_neg_zero(s: str) -> str:
    return s[1:] if s.startswith("-") and float(s) == 0 else s


def _fmt_cost(v: float, how: str) -> str:
    return _no_neg_zero(f"{v:.4g}" if how == "sig4" else f"{v:.2f}")


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


# --------------------------------------------------------------------------- tables


def _table(header: list[str], n_text_cols: int, rows: list[list[str]]) -> list[str]:
    align = [":---"] * n_text_cols + ["---:"] * (len(header) - n_text_cols)
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _quality_block(
    row_keys: list[tuple[str, str]],
    columns: list[str],
    cells: dict[tuple[tuple[str, str], str], list[float]],
    fmt: _Fmt,
) -> tuple[list[list[str]], bool]:
    """Quality cells + Avg for each row. Returns the cell strings per row (without the
    Method/RoC columns) and whether some row's Avg is missing."""
    means: dict[tuple[tuple[str, str], str], float] = {k: _mean(v) for k, v in cells.items()}
    avgs: dict[tuple[str, str], float] = {}
    for rk in row_keys:
        vals = [means[(rk, c)] for c in columns if (rk, c) in means]
        if len(vals) == len(columns):
            avgs[rk] = _mean(vals)

    def best_of(keys: Iterable[float]) -> float | None:
        keys = list(keys)
        if not keys:
            return None
        return min(keys) if fmt.lower_better else max(keys)

    best = {c: best_of(fmt.key(means[(rk, c)]) for rk in row_keys if (rk, c) in means) for c in columns}
    best_avg = best_of(fmt.key(a) for a in avgs.values())

    out = []
    for rk in row_keys:
        row = []
        for c in columns:
            vals = cells.get((rk, c))
            if not vals:
                row.append(_DASH)
                continue
            text = fmt.num(means[(rk, c)])
            if len(vals) > 1:
                text += f" ± {fmt.num(_std(vals))}"
            if fmt.key(means[(rk, c)]) == best[c]:
                text = f"**{text}**"
            row.append(text)
        if rk in avgs:
            text = fmt.num(avgs[rk])
            row.append(f"**{text}**" if fmt.key(avgs[rk]) == best_avg else text)
        else:
            row.append(_DASH)
        out.append(row)
    return out, len(avgs) < len(row_keys)


def _row_key(rec: dict) -> tuple[str, str]:
    run = rec["run"]
    return run["method"], (run.get("resource_label") or _DASH)


def _cost_value(rec: dict, path: tuple[str, ...]) -> float | None:
    node = rec["cost"]
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def _warn_duplicate_seeds(task: str, metric: str, groups: dict, what: str) -> None:
    for (rk, col), seeds in sorted(groups.items()):
        dup = sorted(s for s, n in Counter(seeds).items() if n > 1)
        if dup:
            log.warning("%s/%s: %s %s %s has several runs with seed(s) %s; averaging them all",
                        task, metric, rk[0], rk[1], f"{what} {col}", dup)


def _mixed_test_sets(recs: list[dict]) -> list[str]:
    """``setting seed N`` for each setting/seed whose runs held out different test examples
    (``run.holdout_indices``; records written before that key existed are not compared)."""
    held: dict = defaultdict(set)
    for r in recs:
        idx = r["run"].get("holdout_indices")
        if isinstance(idx, list):
            held[(r["run"]["setting"], r["run"]["seed"])].add(tuple(idx))
    return [f"{_esc(setting)} seed {seed}" for (setting, seed), sets in sorted(held.items()) if len(sets) > 1]


def _metric_section(task: str, metric: str, recs: list[dict], heading_level: int) -> tuple[list[str], bool]:
    fmt = _Fmt(metric)
    row_keys = sorted({_row_key(r) for r in recs})
    settings = sorted({r["run"]["setting"] for r in recs}, key=setting_sort_key)

    cells: dict = defaultdict(list)
    seeds: dict = defaultdict(list)
    for r in recs:
        final = r["results"]["final"]
        if final is None:
            continue
        key = (_row_key(r), r["run"]["setting"])
        cells[key].append(final * fmt.scale)
        seeds[key].append(r["run"]["seed"])
    _warn_duplicate_seeds(task, metric, seeds, "setting")

    quality, avg_missing = _quality_block(row_keys, settings, cells, fmt)
    costs: dict = defaultdict(lambda: defaultdict(list))
    for r in recs:
        for name, path, _ in COST_COLUMNS:
            v = _cost_value(r, path)
            if v is not None:
                costs[_row_key(r)][name].append(v)

    header = ["Method", "RoC"] + [_esc(s) for s in settings] + ["Avg"] + [c[0] for c in COST_COLUMNS]
    rows = []
    for rk, q in zip(row_keys, quality):
        cost_cells = []
        for name, _, how in COST_COLUMNS:
            vals = costs[rk][name]
            cost_cells.append(_fmt_cost(_mean(vals), how) if vals else _DASH)
        rows.append([_esc(rk[0]), _esc(rk[1])] + q + cost_cells)
    lines = _table(header, 2, rows)

    # Per-domain tables, one per setting that has per-domain results.
    for setting in settings:
        dom_recs = [r for r in recs if r["run"]["setting"] == setting and r["results"]["per_domain"]]
        if not dom_recs:
            continue
        domains = sorted({d for r in dom_recs for d in r["results"]["per_domain"]})
        d_rows = sorted({_row_key(r) for r in dom_recs})
        d_cells: dict = defaultdict(list)
        for r in dom_recs:
            for d, v in r["results"]["per_domain"].items():
                d_cells[(_row_key(r), d)].append(v * fmt.scale)
        d_quality, d_missing = _quality_block(d_rows, domains, d_cells, fmt)
        avg_missing = avg_missing or d_missing
        lines += ["", f"{'#' * heading_level} Per-domain ({_esc(setting)})", ""]
        lines += _table(["Method", "RoC"] + [_esc(d) for d in domains] + ["Avg"], 2,
                        [[_esc(rk[0]), _esc(rk[1])] + q for rk, q in zip(d_rows, d_quality)])
    return lines, avg_missing


def _metric_label(metric: str) -> str:
    fmt = _Fmt(metric)
    unit = "%, " if fmt.percent else ""
    return f"`{metric}` ({unit}{'lower' if fmt.lower_better else 'higher'} is better)"


def render_task(task: str, records: list[dict]) -> str:
    """The markdown leaderboard of ``task`` from ``records`` (records of other tasks are
    ignored). Records must be valid (:func:`~fedbench.runners.records.validate_record`)."""
    recs = [r for r in records if r["run"]["task"] == task]
    for r in recs:
        validate_record(r)
    ok = [r for r in recs if r["status"] == "ok"]
    skipped = Counter(r["status"] for r in recs if r["status"] != "ok")
    metrics = sorted({r["results"]["metric_name"] for r in ok})

    lines = [f"# Leaderboard: {_esc(task)}", ""]
    if metrics:
        label = ", ".join(_metric_label(m) for m in metrics)
        lines.append(f"{'Metric' if len(metrics) == 1 else 'Metrics'}: {label}. "
                     f"Generated by `fedbench leaderboard` from {len(recs)} result records; do not edit by hand.")
    else:
        lines.append(f"Generated by `fedbench leaderboard` from {len(recs)} result records; "
                     "none finished with status `ok`. Do not edit by hand.")

    avg_missing = False
    for metric in metrics:
        lines.append("")
        level = 2
        if len(metrics) > 1:
            lines += [f"## {_esc(metric)}", ""]
            level = 3
        section, missing = _metric_section(task, metric, [r for r in ok if r["results"]["metric_name"] == metric],
                                           level)
        lines += section
        avg_missing = avg_missing or missing

    notes = []
    if metrics:
        notes += [
            "Quality: `results.final` of each run (the global model; personalised methods report the mean "
            "of client-local metrics); percentage metrics are shown x100. A cell with several runs (seeds) "
            "shows mean ± sample standard deviation (ddof=1).",
            "**Bold**: best value of each setting column and of Avg (ties are all bold).",
            "Avg: mean over the row's setting columns (per-domain tables: over domains)."
            + (" `-`: the row has no result for some setting, so no average." if avg_missing else ""),
            "RoC: the run's resource label (`--roc` ratio, `--capacities` list, or `-` for none).",
            "Costs, each the mean over all of the row's runs (every setting and seed): TFLOPs/step = "
            "TFLOPs of one client training step (forward + backward); Mem GB = peak memory of one "
            "client step; MB/round = traffic down + up per client per round; s/round = wall seconds "
            "per round.",
        ]
    mixed = _mixed_test_sets(ok)
    if mixed:
        log.warning("%s: runs scored on different held-out test examples: %s", task, "; ".join(mixed))
        notes.append("Not strictly comparable: some runs with the same setting and seed were scored on "
                     "different test examples (different `run.server_holdout`): " + "; ".join(mixed) + ".")
    if skipped:
        n = sum(skipped.values())
        parts = ", ".join(f"{skipped[s]} {s}" for s in sorted(skipped))
        notes.append(f"Skipped {n} record{'s' if n != 1 else ''} that did not finish ({parts}).")
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def generate(records_root: str | os.PathLike, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``<out_dir>/<task>.md`` for every task in the records under ``records_root``;
    returns the written paths, sorted. Files of tasks without records are left alone."""
    records = load_records(records_root)
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_task[r["run"]["task"]].append(r)
    out_dir = Path(out_dir)
    paths = []
    for task in sorted(by_task):
        if not _SAFE_TASK.fullmatch(task):
            log.warning("skipping task %r: not usable as a file name", task)
            continue
        paths.append(atomic_write_text(out_dir / f"{task}.md", render_task(task, by_task[task])))
    if not paths:
        log.warning("no result records under %s; no leaderboard written", records_root)
    return sorted(paths)
