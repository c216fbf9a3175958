"""Cost plots of one setting.

* ``pareto``: quality against the weakest tier's TFLOPs/step, peak memory and traffic,
  as small multiples: one row of panels per method family, one column per cost. Every
  panel shows all rows in grey and each cohort's Pareto front as a grey step line (one
  line style per cohort); the family's rows are coloured, named next to their point,
  marked by cohort (one marker each) and filled when on their cohort's front. A row whose
  weakest tier never trains (Exclusive) is drawn as ``X`` and kept off the fronts: its
  zero weakest-tier cost comes from leaving the weak clients out, not from serving them.
* ``tiers``: per-tier TFLOPs/step, memory and traffic of every row (horizontal bars,
  one line per row, rows grouped under their family's name; no bar: the tier does not
  train).

Sizes follow :func:`~fedbench.leaderboard.units.size_unit` (MB below 1 GB, else GB), the
memory axis names its source (accounted, or measured on CUDA).
"""

from __future__ import annotations

from fedbench.leaderboard.groups import Section, weak_strong_tiers
from fedbench.leaderboard.plot_style import (
    CONTEXT,
    by_family,
    cohort_markers,
    row_colours,
    spread,
    style_key,
    style_names,
)
from fedbench.leaderboard.render import Fmt
from fedbench.leaderboard.stats import mean, pareto_front
from fedbench.leaderboard.table import cohort, cohort_names, weak_tier_idle
from fedbench.leaderboard.units import GB, MB, mem_source_label, size_unit

__all__ = ["TIER_COSTS", "near_groups", "pareto", "tier_order", "tiers", "weak_cost", "weak_front"]

#: (axis name, record cost, field, bytes per record unit or None for TFLOPs)
TIER_COSTS = (("TFLOPs/step", "tflops_per_step", "mean", None), ("peak memory", "peak_mem_gb", "mean", GB),
              ("traffic per round", "traffic_mb_per_client_round", "total", MB))
_FRONT_STYLES = ("-", "--", ":", "-.")


def tier_order(tier: str) -> tuple:
    """Sort key of a ``by_tier`` key: numeric ids in numeric order, any other key after them."""
    return (0, int(tier), "") if tier.isdigit() else (1, 0, tier)


def near_groups(points: list[tuple[float, float]], within: float) -> list[list[tuple[float, float]]]:
    """(quality, cost) points of one method split where qualities, in order, are more
    than ``within`` apart: each group gets one label (a method's points under two
    cohorts share a label when close, get one each when far apart)."""
    groups: list[list[tuple[float, float]]] = []
    for p in sorted(points):
        if groups and p[0] - groups[-1][-1][0] <= within:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


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


def pareto(plt, sec: Section, setting: str, title: str):
    fmt = Fmt(sec.metric)
    rows = [rk for rk in sec.rows if sec.cells.get((rk, setting))]
    families, markers, colours = by_family(rows), cohort_markers(rows), row_colours(sec)
    groups, names, labels = sorted(markers), cohort_names(rows), style_names(rows)
    fig, axes = plt.subplots(len(families), 3, figsize=(15, 3.1 * len(families) + 1.2), sharex="col", sharey=True,
                             squeeze=False)
    qs = [mean(list(sec.cells[(rk, setting)].values())) for rk in rows] or [0.0]
    pad = (max(qs) - min(qs) or 1) * 0.06
    ylim = (min(qs) - pad, max(qs) + pad)
    gap = pad * 1.1
    idle: set = set()
    for j, (name, cost, field, per) in enumerate(TIER_COSTS):
        raw, front, idle = weak_front(sec, setting, cost, field)
        div, xlabel = _axis_label(sec, f"weakest-tier {name}", cost, per, [c for _, c in raw.values()])
        points = {rk: (q, c / div) for rk, (q, c) in raw.items()}
        fronts = {g: {rk for rk in front if cohort(rk) == g} for g in groups}
        xs = [c for _, c in points.values()] or [0.0]
        dx = (max(xs) - min(xs) or 1) * 0.025
        for i, members in enumerate(families.values()):
            ax = axes[i][j]
            ax.scatter(xs, [q for q, _ in points.values()], s=10, color=CONTEXT, zorder=1)
            for k, g in enumerate(groups):
                fr = sorted((points[rk][1], points[rk][0]) for rk in fronts[g])
                if len(fr) > 1:
                    ax.step([c for c, _ in fr], [q for _, q in fr], where="post", color="gray", linewidth=0.9,
                            linestyle=_FRONT_STYLES[k % len(_FRONT_STYLES)], zorder=2)
            mine = [rk for rk in members if rk in points]
            for rk in mine:
                q, c = points[rk]
                colour, on = colours[rk][0], rk in fronts[cohort(rk)]
                marker = "X" if rk in idle else markers[cohort(rk)]
                ax.scatter([c], [q], s=46, marker=marker, zorder=4, linewidths=1.4,
                           facecolors=colour if on or rk in idle else "white", edgecolors=colour)
            tags = [(k, pts) for k in dict.fromkeys(style_key(rk) for rk in mine)
                    for pts in near_groups([points[rk] for rk in mine if style_key(rk) == k], 2 * gap)]
            heights = spread([mean([q for q, _ in pts]) for _, pts in tags], gap, *ylim)
            for (k, pts), ly in zip(tags, heights):
                colour = colours[next(rk for rk in mine if style_key(rk) == k)][0]
                lx = max(c for _, c in pts) + dx
                for q, c in pts:
                    ax.plot([c, lx], [q, ly], color=colour, linewidth=0.5, alpha=0.6, zorder=3)
                idle_mark = " (weak tier idle)" if any(r in idle for r in mine if style_key(r) == k) else ""
                ax.text(lx, ly, " " + labels[k] + idle_mark, fontsize=7.5, color=colour, va="center")
            ax.set_xlim(min(xs) - dx, max(xs) + 16 * dx)
            ax.grid(alpha=0.3)
            if i == len(families) - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(f"{list(families)[i]}\n{sec.metric}" + (" (%)" if fmt.percent else ""), fontsize=9)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker=markers[g], linestyle="", color="black", markerfacecolor="black")
               for g in groups]
    texts = [f"{names[g]}: on its front (filled)" for g in groups]
    handles.append(Line2D([], [], marker="o", linestyle="", color="black", markerfacecolor="white"))
    texts.append("hollow: off its cohort's front")
    if idle:
        handles.append(Line2D([], [], marker="X", linestyle="", color="black"))
        texts.append("X: weakest tier never trains (off the fronts)")
    for k, g in enumerate(groups):
        handles.append(Line2D([], [], color="gray", linestyle=_FRONT_STYLES[k % len(_FRONT_STYLES)]))
        texts.append(f"Pareto front, {names[g]}")
    axes[0][0].set_ylim(*ylim)
    fig.legend(handles, texts, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(texts), 4),
               frameon=False)
    fig.suptitle(f"{title}: quality vs the weakest tier's cost (grey dots: every method)", fontsize=11)
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
    fig.suptitle(f"{title}: cost per resource tier (no bar: the tier does not train)", fontsize=11)
    return fig
