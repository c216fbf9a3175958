"""Learning curves: ``results.curve[*].metric`` against the round, mean over seeds with a
min-max band, as small multiples: one row of panels per method family (a family of more than
:data:`~fedbench.leaderboard.plot_style.MAX_LINES` methods over several rows, so its lines do
not pile up), one column per group (resource ratio, federation and budget; at most
:data:`MAX_COLUMNS` side by side, more groups in further blocks of rows below, each block
with only the families that have a run in one of its groups), each group on the round axis of its
own budget (a 10-round run is not squeezed onto a 50-round axis). A panel draws its methods
in distinct colours, named in a margin right of the curves (never on a marker), over the
group's other methods in grey; one legend says what line, band and grey mean."""

from __future__ import annotations

import math
from collections import defaultdict

from fedbench.leaderboard.groups import RowKey, Section
from fedbench.leaderboard.plot_style import CONTEXT, label_margin, panels, row_colours, style_key, style_names
from fedbench.leaderboard.render import Fmt
from fedbench.leaderboard.stats import mean
from fedbench.leaderboard.table import cohort, cohort_names

__all__ = ["MAX_COLUMNS", "MIN_CURVE_POINTS", "curve_points", "curves", "mean_curve"]

#: A curve needs this many evaluated rounds to be drawn (two points show no shape).
MIN_CURVE_POINTS = 3
#: The most groups side by side; more groups go in further blocks of rows below.
MAX_COLUMNS = 3


def mean_curve(sec: Section, rk: RowKey, setting: str, scale: float) -> dict[int, list[float]]:
    """Round -> the row's values in that round over its runs of ``setting`` (scaled)."""
    by_round = defaultdict(list)
    for r in sec.runs[rk]:
        if r["run"]["run_config"]["setting"] == setting:
            for p in r["results"]["curve"]:
                if p["metric"] is not None:
                    by_round[p["round"]].append(p["metric"] * scale)
    return dict(sorted(by_round.items()))


def curve_points(sec: Section, setting: str) -> int:
    """The most evaluated rounds of any run of ``setting`` in the section."""
    return max((sum(p["metric"] is not None for p in r["results"]["curve"])
                for r in sec.records if r["run"]["run_config"]["setting"] == setting), default=0)


def _legend(fig) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color="black", linewidth=1.6), Patch(color="black", alpha=0.13),
               Line2D([], [], color=CONTEXT, linewidth=0.8)]
    texts = ["a method of the panel's family: mean over seeds, named at the right",
             "band: min-max over seeds", "grey: the group's other methods"]
    fig.legend(handles, texts, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False)


def curves(plt, sec: Section, setting: str, title: str):
    """The figure, or None when no run of ``setting`` has :data:`MIN_CURVE_POINTS` points."""
    if curve_points(sec, setting) < MIN_CURVE_POINTS:
        return None
    from matplotlib.ticker import MaxNLocator

    fmt = Fmt(sec.metric)
    data = {rk: mean_curve(sec, rk, setting, fmt.scale) for rk in sec.rows}
    rows = [rk for rk in sec.rows if data[rk]]
    rows_of, names = panels(rows), cohort_names(rows)
    groups = list(names)  # in cohort_names' order
    colours, labels = row_colours(sec), style_names(sec.rows)
    ncol = min(len(groups), MAX_COLUMNS)
    blocks = math.ceil(len(groups) / ncol)  # more groups than columns: further blocks of rows below
    # each block of rows draws only the panels with a run in one of its groups (a family with no
    # run in any of the block's groups would be a row of empty panels)
    kept = [[p for p, members in rows_of.items() if any(cohort(rk) in groups[b * ncol:(b + 1) * ncol]
                                                        for rk in members)] for b in range(blocks)]
    first = [sum(len(k) for k in kept[:b]) for b in range(blocks)]  # each block's first row
    nrow = first[-1] + len(kept[-1])
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.6 * ncol + 0.6, 2.9 * nrow + 1.1), sharey=True, squeeze=False)
    ys_all = [v for rk in rows for vs in data[rk].values() for v in vs]
    pad = (max(ys_all) - min(ys_all) or 1) * 0.04
    ylim = (min(ys_all) - pad, max(ys_all) + pad)
    for g, group in enumerate(groups):
        block, j = divmod(g, ncol)
        xs_col = sorted({x for rk in rows if cohort(rk) == group for x in data[rk]})  # this group's budget
        span = (xs_col[-1] - xs_col[0]) or 1
        ticks = [t for t in MaxNLocator(integer=True).tick_values(xs_col[0], xs_col[-1])
                 if xs_col[0] <= t <= xs_col[-1]]
        for k, panel in enumerate(kept[block]):
            members = rows_of[panel]
            ax = axes[first[block] + k][j]
            for rk in rows:  # context: the group's other methods
                if cohort(rk) == group and rk not in members:
                    xs = list(data[rk])
                    ax.plot(xs, [mean(data[rk][x]) for x in xs], color=CONTEXT, linewidth=0.8, zorder=1)
            ends = []
            for rk in (rk for rk in members if cohort(rk) == group):
                xs = list(data[rk])
                ys = [mean(data[rk][x]) for x in xs]
                colour, style = colours[rk]
                ax.plot(xs, ys, color=colour, linestyle=style, linewidth=1.6, zorder=3,
                        marker="o" if len(xs) < 12 else None, markersize=3)
                if any(len(v) > 1 for v in data[rk].values()):
                    ax.fill_between(xs, [min(data[rk][x]) for x in xs], [max(data[rk][x]) for x in xs],
                                    color=colour, alpha=0.13, linewidth=0, zorder=2)
                ends.append((xs[-1], ys[-1], labels[style_key(rk)], colour))
            label_margin(ax, ends, xs_col[-1] + 0.04 * span, *ylim)
            if not ends:
                ax.text(0.5, 0.5, "no runs", transform=ax.transAxes, ha="center", color="gray")
            ax.grid(alpha=0.3)
            ax.set_xlim(xs_col[0] - 0.02 * span, xs_col[-1] + 0.45 * span)
            ax.set_xticks(ticks)
            if k == 0:
                ax.set_title(names[group], fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{panel}\n{sec.metric}" + (" (%)" if fmt.percent else ""), fontsize=9)
            if k == len(kept[block]) - 1:
                ax.set_xlabel("round")
            else:
                ax.tick_params(labelbottom=False)
    for g in range(len(groups), blocks * ncol):  # the last block's empty columns
        for k in range(len(kept[-1])):
            axes[first[-1] + k][g % ncol].set_visible(False)
    axes[0][0].set_ylim(*ylim)
    _legend(fig)
    fig.suptitle(f"{title}: learning curves, one column per group on its own round axis", fontsize=11, y=1.0,
                 va="bottom")
    return fig
