"""Plots of the leaderboard (``fedbench plot``; needs the ``plot`` extra: matplotlib).

Per task, metric and setting, next to the markdown (``<out>/<task>/<setting>_<kind>.png``;
with several metrics in a task ``<setting>-<metric>_<kind>.png``):

* ``curves``: learning curves (:mod:`~fedbench.leaderboard.plot_curves`), only where a run
  has :data:`~fedbench.leaderboard.plot_curves.MIN_CURVE_POINTS` evaluated rounds;
* ``pareto``: quality against the weakest tier's costs with each group's Pareto front;
* ``tiers``: per-tier costs of every row (both :mod:`~fedbench.leaderboard.plot_costs`);
* ``simtime``: score against simulated seconds, for ``--devices`` records
  (:mod:`~fedbench.leaderboard.budget`).

Crowded sections stay readable: the curves are small multiples, one row of panels per
method family (:mod:`~fedbench.leaderboard.families`; a family of many methods over several
rows) and one column per group, each on the round axis of its own budget; the pareto plot
has one row per group on its own quality axis, points coloured by family. Methods are named
in a margin right of every point (no name covers a marker), and one legend says what the
colours and marks mean. Titles say what the setting means (``2/- (2 classes per client,
equal shares)``).

matplotlib is imported lazily with the Agg backend, so the rest of the leaderboard (and
importing this module) works without it.
"""

from __future__ import annotations

from pathlib import Path

from fedbench.leaderboard.budget import plot_simtime
from fedbench.leaderboard.output import file_stem
from fedbench.leaderboard.groups import Section
from fedbench.leaderboard.output import remove_file, save_png
from fedbench.leaderboard.plot_costs import pareto, tiers
from fedbench.leaderboard.plot_curves import MIN_CURVE_POINTS, curve_points, curves
from fedbench.leaderboard.plot_style import title
from fedbench.leaderboard.sections import SAFE_TASK, ok_sections

__all__ = ["KINDS", "MIN_CURVE_POINTS", "curve_points", "plot_records", "plot_section"]

#: The plot kinds, in the order the tables link them (``simtime``: score against simulated
#: time, --devices records only, :func:`fedbench.leaderboard.budget.plot_simtime`).
KINDS = ("curves", "pareto", "tiers", "simtime")


def pyplot():
    """matplotlib's pyplot with the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_section(sec: Section, out_dir: str | Path, multi_metric: bool = False) -> list[Path]:
    """Draw the plots of every setting of one section; returns the written paths. A curves
    plot that is not drawn (too few points) is removed if an older run left one."""
    plt = pyplot()
    folder = Path(out_dir) / sec.task
    paths = []
    for setting in sec.settings:
        stem = file_stem(setting) + (f"-{file_stem(sec.metric)}" if multi_metric else "")
        head = title(sec, setting, multi_metric)
        figs = {"curves": curves(plt, sec, setting, head), "pareto": pareto(plt, sec, setting, head),
                "tiers": tiers(plt, sec, setting, head)}
        for kind in figs:  # simtime is drawn per task from the records (plot_records)
            path = folder / f"{stem}_{kind}.png"
            if figs[kind] is not None:
                paths.append(save_png(plt, figs[kind], path, Path(out_dir)))
            else:
                remove_file(path, Path(out_dir))
    return paths


def plot_records(records: list[dict], out_dir: str | Path) -> list[Path]:
    """Plots of every task in ``records`` under ``out_dir``; returns the written paths,
    sorted. Tasks whose name is not usable as a folder name are skipped."""
    paths = []
    for task in sorted({r["run"]["task"] for r in records}):
        if not SAFE_TASK.fullmatch(task):
            continue
        _, _, sections = ok_sections(task, records)
        for sec in sections:
            paths += plot_section(sec, out_dir, multi_metric=len(sections) > 1)
        paths += plot_simtime(pyplot(), records, task, out_dir)
    return sorted(paths)
