"""Markdown leaderboards from result records (``fedbench leaderboard``).

One file per task, ``<out_dir>/<task>.md``, in the shape of the Fed-HeLLo main-results
tables (Tables II-VI): a quality table (one row per method, resource label and config
variant; one column per data setting, their average), a cost table, and per-domain tables.

Rules (all deterministic: the same records in any order give byte-identical markdown):

* Only records with ``status == "ok"`` count; the notes say how many were skipped.
* Records of a task that use different ``results.metric_name`` get one section each.
* Rows: one per (``run.method``, ``run.resource_label``, config variant), see
  :mod:`fedbench.leaderboard.groups`; runs of different configs are never averaged. Sorted
  by method key, label (empty shows as ``-``), variant.
* Setting columns: ``iid`` first, then the other settings sorted as strings.
* Quality cell: ``results.final``; x100 with 2 decimals for the metrics in
  :data:`PERCENT_METRICS`, else 4 significant digits. With >= 2 seeds:
  ``mean ± h (n)``, h the 95% t-based CI half-width; `` † d`` marks a cell significantly
  behind its cohort's best in its column (paired t-test over shared seeds, d = mean paired
  difference); see :mod:`fedbench.leaderboard.table`.
* ``Avg``: mean of the row's setting-cell means; ``-`` when the row lacks a setting.
* The best value of each setting column and of ``Avg`` within each cohort (same resource
  label and federation, :func:`~fedbench.leaderboard.table.cohort`) is bold (compared as
  displayed, so ties are all bold); lower is better only for the metrics in
  :data:`LOWER_IS_BETTER`.
* Cost table: each column the mean over all of the row's runs (nulls ignored), overall and
  for the weakest / strongest tier; sizes by :func:`~fedbench.units.format_bytes`;
  server cost; Pareto mark within each cohort on (Avg, weakest tier's TFLOPs/step).
* Settings whose runs report ``results.per_domain`` get a "Per-domain (<setting>)" table.
* Notes (:mod:`fedbench.leaderboard.notes`) say what every mark means for this table.
* Plots (:func:`fedbench.leaderboard.plots.plot_records`,
  ``<out_dir>/<task>/<setting>_<kind>.png``) are drawn first with ``plots=True`` (what
  ``fedbench plot`` does) and linked whenever present.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from fedbench.leaderboard.notes import merge_facts, task_notes
from fedbench.leaderboard.output import write_text
from fedbench.leaderboard.plots import KINDS, MIN_CURVE_POINTS, curve_points, plot_records
from fedbench.leaderboard.render import LOWER_IS_BETTER, PERCENT_METRICS, Fmt, esc, render_section
from fedbench.leaderboard.budget import budget_lines
from fedbench.leaderboard.sections import by_file_task, ok_sections
from fedbench.outfiles import check_output
from fedbench.records import load_records, one_line, prepare_out_dir
from fedbench.version import __version__

log = logging.getLogger(__name__)

__all__ = ["LOWER_IS_BETTER", "PERCENT_METRICS", "REGENERATE", "generate", "plot_links", "render_task", "written_by"]

#: How the committed tables are regenerated (written into every header).
REGENERATE = "fedbench leaderboard --records leaderboard/records --out leaderboard"


def _mixed_test_sets(recs: list[dict]) -> list[str]:
    """``setting seed N`` for each setting/seed whose runs held out different test examples
    (``run.holdout_indices``; records written before that key existed are not compared)."""
    held: dict = defaultdict(set)
    for r in recs:
        idx = r["run"].get("holdout_indices")
        if isinstance(idx, list):
            held[(r["run"]["run_config"]["setting"], r["run"]["run_config"]["seed"])].add(tuple(idx))
    return [f"{esc(setting)} seed {seed}" for (setting, seed), sets in sorted(held.items()) if len(sets) > 1]


def written_by(recs: Sequence[dict]) -> str:
    """``"written by fedbench 0.1.0 "`` (the versions that wrote ``recs``; ``""`` for none)."""
    versions = sorted({r["run"]["fedbench_version"] for r in recs if r["run"].get("fedbench_version")})
    return f"written by fedbench {', '.join(esc(v) for v in versions)} " if versions else ""


def _metric_label(metric: str) -> str:
    fmt = Fmt(metric)
    unit = "%, " if fmt.percent else ""
    return f"`{esc(metric)}` ({unit}{'lower' if fmt.lower_better else 'higher'} is better)"


def _plots_line(plots: Sequence[str], sections) -> list[str]:
    line = "Plots: " + ", ".join(f"[{esc(Path(p).stem)}]({p})" for p in plots) + "."
    most = max((curve_points(sec, s) for sec in sections for s in sec.settings), default=0)
    if most < MIN_CURVE_POINTS:
        line += (f" No learning curves: they are drawn from {MIN_CURVE_POINTS} evaluated rounds on, and these "
                 f"runs have at most {most}.")
    return ["", line]


def render_task(task: str, records: list[dict], plots: Sequence[str] = ()) -> str:
    """The markdown leaderboard of ``task`` from ``records`` (records of other tasks are
    ignored). Records must be valid (:func:`~fedbench.records.validate_record`).
    ``plots``: relative paths of plot images to link."""
    recs, skipped, sections = ok_sections(task, records)
    metrics = [sec.metric for sec in sections]
    gen = (f"Generated by `fedbench leaderboard` (fedbench {__version__}) from {len(recs)} result records "
           f"{written_by(recs)}(committed tables: `{REGENERATE}`)")
    lines = [f"# Leaderboard: {esc(task)}", ""]
    if metrics:
        label = ", ".join(_metric_label(m) for m in metrics)
        lines.append(f"{'Metric' if len(metrics) == 1 else 'Metrics'}: {label}. {gen}; do not edit by hand.")
    else:
        lines.append(f"{gen}; none finished with status `ok`. Do not edit by hand.")
    if plots:
        lines += _plots_line(plots, sections)

    facts = []
    varying: set = set()
    for sec in sections:
        lines.append("")
        level = 2
        if len(sections) > 1:
            lines += [f"## {esc(sec.metric)}", ""]
            level = 3
        section, f = render_section(sec, level)
        lines += section
        facts.append(f)
        varying.update(sec.varying)

    ok = [r for r in recs if r["status"] == "ok"]
    lines += budget_lines(ok)  # --devices records only: quality under budget, cost to target
    mixed = _mixed_test_sets(ok)
    if mixed:
        log.warning("%s: runs scored on different held-out test examples: %s", task, "; ".join(mixed))
    settings = list(dict.fromkeys(s for sec in sections for s in sec.settings))
    notes = task_notes(settings, merge_facts(facts), varying, ok, mixed, skipped)
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def plot_links(out_dir: str | os.PathLike, task: str) -> list[str]:
    """Relative paths (from ``out_dir``) of the plot images of ``task`` that exist, sorted
    by setting then kind."""
    folder = Path(out_dir) / task
    if not folder.is_dir():
        return []
    found = [p for p in folder.glob("*.png") if p.stem.rsplit("_", 1)[-1] in KINDS]
    found.sort(key=lambda p: (p.stem.rsplit("_", 1)[0], KINDS.index(p.stem.rsplit("_", 1)[-1])))
    return [f"{task}/{p.name}" for p in found]


def generate(records_root: str | os.PathLike, out_dir: str | os.PathLike, *, plots: bool = False) -> list[Path]:
    """Write ``<out_dir>/<task>.md`` for every task in the records under ``records_root``;
    returns the written paths (with ``plots``, the PNGs too), sorted. Files of tasks
    without records are left alone. ``plots``: first draw the plots
    (:func:`~fedbench.leaderboard.plots.plot_records`), then link them."""
    records = load_records(records_root)
    by_task = by_file_task(records)
    if not by_task:
        log.warning("no result records under %s; no leaderboard written", one_line(str(records_root)))
        return []
    out_dir = prepare_out_dir(out_dir)
    for task in sorted(by_task):  # every table's place checked before the first is written
        check_output(out_dir / f"{task}.md", out_dir)
    paths = plot_records([r for rs in by_task.values() for r in rs], out_dir) if plots else []
    for task in sorted(by_task):
        text = render_task(task, by_task[task], plot_links(out_dir, task))
        paths.append(write_text(out_dir / f"{task}.md", text, out_dir))
    return sorted(paths)
