"""Cost plots of one setting.

* ``pareto``: quality against the weakest tier's TFLOPs/step, peak memory and traffic,
  as small multiples: one row of panels per group (resource ratio, federation and budget;
  rows of different groups are never compared), each on its own quality axis, one column
  per cost. A point per method, coloured by method family (one legend names the families),
  filled when on its group's Pareto front (a grey step line), named in a margin right of
  every point with a leader line (no name covers a marker). A row whose weakest tier never
  trains (Exclusive) is drawn as ``X`` and kept off the front: its zero weakest-tier cost
  comes from leaving the weak clients out, not from serving them.
* ``tiers``: per-tier TFLOPs/step, memory and traffic of every row (horizontal bars,
  one line per row, rows grouped under their family's name; no bar: the tier does not
  train).

Sizes follow :func:`~fedbench.units.size_unit` (MB below 1 GB, else GB), the
memory axis names its source (accounted, or measured on CUDA).
"""

from __future__ import annotations

from fedbench.leaderboard.groups import Section, weak_strong_tiers
from fedbench.leaderboard.families import family_of
from fedbench.leaderboard.plot_style import by_family, family_colours, label_margin, style_key, style_names
from fedbench.leaderboard.render import Fmt
from fedbench.leaderboard.stats import mean, pareto_front
from fedbench.leaderboard.table import cohort, cohort_names, weak_tier_idle
from fedbench.units import GB, MB, mem_source_label, size_unit

__all__ = ["TIER_COSTS", "pareto", "tier_order", "tiers", "weak_cost", "weak_front"]

#: (axis name, record cost, field, bytes per record unit or None for TFLOPs)
TIER_COSTS = (("TFLOPs/step", "tflops_per_step", "mean", None), ("peak memory", "peak_mem_gb", "mean", GB),
              ("traffic per round", "traffic_mb_per_client_round", "total", MB))


def tier_order(tier: str) -> tuple:
    """Sort key of a ``by_tier`` key: numeric ids in numeric order, any other key after them."""
    return (0, int(tier), "") if tier.isdigit() else (1, 0, tier)


def weak_cost(runs: list[dict], cost: str, field: str) -> float | None:
    """Mean over ``runs`` of their weakest tier's ``cost.<cost>.by_tier[tier].<field>``."""
    vals = [r["cost"][cost]["by_tier"].get(weak_strong_tiers(r)[0], {}).get(field) for r in runs]
    vals = [v for v in vals if v is not None]
    return mean(vals) if vals else None


def _axis_label(sec: Section, name: str, cost: str, per: float | None, values: list[float]) -> tuple[float, str]:
    """(divisor, axis label) of a cost axis; sizes in MB or GB, memory with its source."""
    if per is None:
        return 1.0, name
    div, unit = size_unit(v * per for v in values)
    label = f"{name}, {unit}"
    if cost == "peak_mem_gb":
        sources = sorted({mem_source_label(r["cost"]["peak_mem_source"]) for r in sec.records})
        label += f" ({' and '.join(sources)})"
    return div / per, label


def weak_front(sec: Section, setting: str, cost: str, field: str) -> tuple[dict, set, set]:
    """(points, front, idle) of one cost panel: points ``{row: (quality, weakest-tier
    cost)}`` of the rows with both (record units), the rows on their cohort's Pareto
    front, and the rows with a run whose weakest tier never trained
    (:func:`~fedbench.leaderboard.table.weak_tier_idle`), drawn but kept off the fronts."""
    runs = {rk: [r for r in sec.runs[rk] if r["run"]["run_config"]["setting"] == setting] for rk in sec.rows}
    quality = {rk: mean([sec.cells[(rk, setting)][s] for s in sorted(sec.cells[(rk, setting)])])
               for rk in sec.rows if sec.cells.get((rk, setting))}
    idle = {rk for rk in quality if any(weak_tier_idle(r) for r in runs[rk])}
    points = {rk: (q, c) for rk, q in quality.items() if (c := weak_cost(runs[rk], cost, field)) is not None}
    front: set = set()
    for g in sorted({cohort(rk) for rk in points}):
        front |= pareto_front({rk: p for rk, p in points.items() if cohort(rk) == g and rk not in idle},
                              higher_quality_better=not Fmt(sec.metric).lower_better)
    return points, front, idle


def _pareto_legend(fig, families: dict, idle: bool) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", linestyle="", color=c, markerfacecolor=c) for c in families.values()]
    texts = list(families)
    handles += [Line2D([], [], marker="o", linestyle="", color="black", markerfacecolor="black"),
                Line2D([], [], marker="o", linestyle="", color="black", markerfacecolor="white"),
                Line2D([], [], color="gray", linewidth=0.9)]
    texts += ["filled: on its group's Pareto front", "hollow: off it", "its group's Pareto front"]
    if idle:
        handles.append(Line2D([], [], marker="X", linestyle="", color="black"))
        texts.append("X: weakest tier never trains (off the front)")
    fig.legend(handles, texts, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(texts), 5),
               frameon=False, title="colour: method family", title_fontsize=8)


def pareto(plt, sec: Section, setting: str, title: str):
    """Quality against the weakest tier's TFLOPs/step, memory and traffic: one row of panels
    per group (resource ratio, federation and budget: only rows of one group are compared),
    each on the quality axis of its own group; a point per method, coloured by family, filled
    on the group's front, named in a margin right of every point; each row titled with its
    group's name."""
    fmt = Fmt(sec.metric)
    rows = [rk for rk in sec.rows if sec.cells.get((rk, setting))]
    names, labels, fam_colour = cohort_names(rows), style_names(sec.rows), family_colours(rows)
    groups = list(names)  # in cohort_names' order
    sizes = [sum(cohort(rk) == g for rk in rows) for g in groups]
    heights = [max(2.6, 0.8 + 0.17 * n) for n in sizes]  # room for a line of text per point
    fig, axes = plt.subplots(len(groups), 3, figsize=(15.5, sum(heights) + 1.0), sharex="col", sharey="row",
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    ylims = {}  # one quality axis per group, the same in its three panels
    for g in groups:
        qs = [mean(list(sec.cells[(rk, setting)].values())) for rk in rows if cohort(rk) == g]
        pad = (max(qs) - min(qs) or 1) * 0.08
        ylims[g] = (min(qs) - pad, max(qs) + pad)
    idle: set = set()
    for j, (name, cost, field, per) in enumerate(TIER_COSTS):
        raw, front, idle_j = weak_front(sec, setting, cost, field)
        idle |= idle_j
        div, xlabel = _axis_label(sec, f"weakest-tier {name}", cost, per, [c for _, c in raw.values()])
        points = {rk: (q, c / div) for rk, (q, c) in raw.items()}
        xs = [c for _, c in points.values()] or [0.0]
        dx = (max(xs) - min(xs) or 1) * 0.025
        for i, g in enumerate(groups):
            ax = axes[i][j]
            mine = [rk for rk in rows if cohort(rk) == g and rk in points]
            fr = sorted((points[rk][1], points[rk][0]) for rk in mine if rk in front)
            if len(fr) > 1:
                ax.step([c for c, _ in fr], [q for _, q in fr], where="post", color="gray", linewidth=0.9, zorder=2)
            ends = []
            for rk in mine:
                q, c = points[rk]
                colour = fam_colour[family_of(rk.method)]
                ax.scatter([c], [q], s=40, marker="X" if rk in idle_j else "o", zorder=4, linewidths=1.3,
                           facecolors=colour if rk in front or rk in idle_j else "white", edgecolors=colour)
                ends.append((c, q, labels[style_key(rk)] + (" (weak tier idle)" if rk in idle_j else ""), colour))
            label_margin(ax, ends, max(xs) + 2 * dx, *ylims[g], fontsize=7)
            ax.set_ylim(*ylims[g])
            ax.set_xlim(min(xs) - dx, max(xs) + 22 * dx)
            ax.grid(alpha=0.3)
            if not mine:
                ax.text(0.5, 0.5, "no runs", transform=ax.transAxes, ha="center", color="gray")
            if i == len(groups) - 1:
                ax.set_xlabel(xlabel)
            if j == 0:  # the group's name over its row, read across (a long name on the y axis ran into the next row)
                ax.set_title(names[g], loc="left", fontsize=9.5)
                ax.set_ylabel(sec.metric + (" (%)" if fmt.percent else ""), fontsize=9)
    _pareto_legend(fig, fam_colour, bool(idle))
    fig.suptitle(f"{title}: quality vs the weakest tier's cost, one row per group", fontsize=11, y=1.0, va="bottom")
    return fig


def tiers(plt, sec: Section, setting: str, title: str):
    rows = [rk for rk in sec.rows if any(r["run"]["run_config"]["setting"] == setting for r in sec.runs[rk])]
    runs = {rk: [r for r in sec.runs[rk] if r["run"]["run_config"]["setting"] == setting] for rk in rows}
    ids = sorted({t for rk in rows for r in runs[rk] for t in r["cost"]["tflops_per_step"]["by_tier"]}, key=tier_order)
    slots, ticks, heads = [], [], []  # (y, row or None), tick labels, header positions
    several = len({rk.label for rk in rows}) > 1
    for family, members in by_family(rows).items():
        heads.append(len(slots))
        slots.append(None)
        ticks.append(family)
        for rk in members:
            slots.append(rk)
            ticks.append(sec.names[rk] + (f" {rk.label}" if several else ""))
    fig, axes = plt.subplots(1, 3, figsize=(14, max(3.6, 1.4 + 0.1 * len(slots) * max(len(ids), 2))), sharey=True)
    height = 0.8 / max(len(ids), 1)
    shades = plt.get_cmap("Blues")
    for ax, (name, cost, field, per) in zip(axes, TIER_COSTS):
        vals = {t: [mean(v) if (v := [r["cost"][cost]["by_tier"][t][field] for r in runs[rk]
                                      if t in r["cost"][cost]["by_tier"]]) else None for rk in slots if rk]
                for t in ids}
        div, label = _axis_label(sec, name, cost, per, [v for vs in vals.values() for v in vs if v is not None])
        ys = [y for y, rk in enumerate(slots) if rk]
        for k, t in enumerate(ids):
            ax.barh([y + (k - (len(ids) - 1) / 2) * height for y in ys],
                    [0.0 if v is None else v / div for v in vals[t]], height,
                    color=shades(0.35 + 0.55 * k / max(len(ids) - 1, 1)),
                    label=f"tier {t}" + (" (weakest)" if k == 0 and len(ids) > 1 else "")
                    + (" (strongest)" if k == len(ids) - 1 and len(ids) > 1 else ""))
        for y in heads[1:]:
            ax.axhline(y, color="gray", linewidth=0.6)
        ax.set(xlabel=label)
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_yticks(range(len(slots)), ticks, fontsize=7.5)
    for y in heads:
        axes[0].get_yticklabels()[y].set_fontweight("bold")
    axes[0].set_ylim(len(slots) - 0.5, -0.5)
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=len(ids), frameon=False)
    fig.suptitle(f"{title}: cost per resource tier (no bar: the tier does not train)", fontsize=11, y=1.0, va="bottom")
    return fig
