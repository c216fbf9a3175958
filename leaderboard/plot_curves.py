"""Learning curves: ``results.curve[*].metric`` against the round, mean over seeds with a
min-max band, as small multiples: one row of panels per method family, one column per
cohort (resource ratio and federation). A panel draws its family in distinct colours,
named at the line ends, over the cohort's other methods in grey."""

from __future__ import annotations

from collections import defaultdict

from fedbench.leaderboard.groups import RowKey, Section
from fedbench.leaderboard.plot_style import CONTEXT, by_family, row_colours, spread, style_key, style_names
from fedbench.leaderboard.render import Fmt
from fedbench.leaderboard.stats import mean
from fedbench.leaderboard.table import cohort, cohort_names

__all__ = ["MIN_CURVE_POINTS", "curve_points", "curves", "mean_curve"]

#: A curve needs this many evaluated rounds to be drawn (two points show no shape).
MIN_CURVE_POINTS = 3


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


def curves(plt, sec: Section, setting: str, title: str):
    """The figure, or None when no run of ``setting`` has :data:`MIN_CURVE_POINTS` points."""
    if curve_points(sec, setting) < MIN_CURVE_POINTS:
        return None
    fmt = Fmt(sec.metric)
    data = {rk: mean_curve(sec, rk, setting, fmt.scale) for rk in sec.rows}
    rows = [rk for rk in sec.rows if data[rk]]
    families, names = by_family(rows), cohort_names(rows)
    groups = sorted(names)
    colours = row_colours(sec)
    xs_all = sorted({x for rk in rows for x in data[rk]})
    span = xs_all[-1] - xs_all[0] or 1
    fig, axes = plt.subplots(len(families), len(groups), figsize=(5.6 * len(groups) + 0.6, 2.9 * len(families) + 0.9),
                             sharex=True, sharey=True, squeeze=False)
    ys_all = [v for rk in rows for vs in data[rk].values() for v in vs]
    pad = (max(ys_all) - min(ys_all) or 1) * 0.04
    ylim = (min(ys_all) - pad, max(ys_all) + pad)
    gap = pad * 1.8
    labels = style_names(rows)
    for i, (family, members) in enumerate(families.items()):
        for j, group in enumerate(groups):
            ax = axes[i][j]
            for rk in rows:  # context: the cohort's other methods
                if cohort(rk) == group and rk not in members:
                    xs = list(data[rk])
                    ax.plot(xs, [mean(data[rk][x]) for x in xs], color=CONTEXT, linewidth=0.8, zorder=1)
            mine = [rk for rk in members if cohort(rk) == group]
            ends = []
            for rk in mine:
                xs = list(data[rk])
                ys = [mean(data[rk][x]) for x in xs]
                colour, style = colours[rk]
                ax.plot(xs, ys, color=colour, linestyle=style, linewidth=1.6, zorder=3,
                        marker="o" if len(xs) < 12 else None, markersize=3)
                if any(len(v) > 1 for v in data[rk].values()):
                    ax.fill_between(xs, [min(data[rk][x]) for x in xs], [max(data[rk][x]) for x in xs],
                                    color=colour, alpha=0.13, linewidth=0, zorder=2)
                ends.append((xs[-1], ys[-1], labels[style_key(rk)], colour))
            for (x, y, name, colour), ly in zip(ends, spread([e[1] for e in ends], gap, *ylim)):
                ax.annotate(name, (x, y), xytext=(x + 0.03 * span, ly), textcoords="data", fontsize=7.5,
                            color=colour, va="center", annotation_clip=False,
                            arrowprops={"arrowstyle": "-", "color": colour, "linewidth": 0.5, "alpha": 0.6})
            if not mine:
                ax.text(0.5, 0.5, "no runs", transform=ax.transAxes, ha="center", color="gray")
            ax.grid(alpha=0.3)
            ax.set_xlim(xs_all[0] - 0.02 * span, xs_all[-1] + 0.42 * span)
            if i == 0:
                ax.set_title(names[group], fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{family}\n{sec.metric}" + (" (%)" if fmt.percent else ""), fontsize=9)
            if i == len(families) - 1:
                ax.set_xlabel("round")
    from matplotlib.ticker import MaxNLocator

    ticks = MaxNLocator(integer=True).tick_values(xs_all[0], xs_all[-1])
    axes[0][0].set_xticks([t for t in ticks if xs_all[0] <= t <= xs_all[-1]])
    axes[0][0].set_ylim(*ylim)
    fig.suptitle(f"{title}: learning curves (mean over seeds, band: min-max over seeds; grey: the cohort's "
                 "other methods)", fontsize=11)
    return fig
