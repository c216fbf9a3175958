"""Plots of the leaderboard (``fedbench plot``; needs the ``plot`` extra: matplotlib).

Per task, metric and setting, next to the markdown (``<out>/<task>/<setting>_<kind>.png``;
with several metrics in a task ``<setting>-<metric>_<kind>.png``):

* ``curves``: ``results.curve[*].metric`` against the round, one line per leaderboard row
  (mean over seeds), with a min-max band over seeds; where a method has rows under several
  resource labels (``--roc 6:3:1`` and ``1:1:1``), one panel per label;
* ``pareto``: quality of the setting against the weakest tier's TFLOPs/step, its memory and
  the weakest tier's traffic, the Pareto front of each drawn as a step line (front rows are
  circles and named; with more than 8 rows the others are only coloured, see the legend);
* ``tiers``: per-tier TFLOPs/step, memory (MB below 1 GB) and traffic per row (grouped
  horizontal bars, one row per line).

A row keeps its colour in every plot of a section; where a method has rows under several
resource labels, the pareto and tiers plots name each row with its label (``fedra 6:3:1``).

matplotlib is imported lazily with the Agg backend, so the rest of the leaderboard works
without it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from fedbench.leaderboard.generate import _SAFE_TASK, ok_sections
from fedbench.leaderboard.render import Fmt
from fedbench.leaderboard.stats import mean, pareto_front

__all__ = ["file_stem", "plot_names", "plot_records", "plot_section", "row_styles", "split_by_label"]

_TIER_COSTS = (("TFLOPs/step", "tflops_per_step", "mean"), ("Mem GB", "peak_mem_gb", "mean"),
               ("MB/round", "traffic_mb_per_client_round", "total"))


def file_stem(setting: str) -> str:
    """A setting as a file name: characters other than ``[A-Za-z0-9_.+-]`` become ``_``
    (``20/1.0`` -> ``20_1.0``)."""
    return re.sub(r"[^A-Za-z0-9_.+\-]", "_", setting)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    _pyplot().close(fig)
    return path


def split_by_label(sec) -> list[str]:
    """The resource labels to draw apart: the section's labels in row order where some
    method has rows under more than one of them, else ``[]`` (one panel, names as in the
    table)."""
    labels = list(dict.fromkeys(rk.label for rk in sec.rows))
    by_method = defaultdict(set)
    for rk in sec.rows:
        by_method[rk.method].add(rk.label)
    return labels if any(len(ls) > 1 for ls in by_method.values()) else []


def plot_names(sec) -> dict:
    """Row -> name in the plots: the table's name, plus the resource label where
    :func:`split_by_label` draws labels apart."""
    split = bool(split_by_label(sec))
    return {rk: f"{sec.names[rk]} {rk.label}" if split else sec.names[rk] for rk in sec.rows}


def row_styles(plt, sec) -> dict:
    """Row -> (colour, line style): one per table name (rows of one method under several
    resource labels share it), the 60 colours of tab20, tab20b and tab20c, then dashed and
    dotted once they run out."""
    colors = sum((plt.get_cmap(c).colors for c in ("tab20", "tab20b", "tab20c")), ())
    index = {name: i for i, name in enumerate(dict.fromkeys(sec.names[rk] for rk in sec.rows))}
    return {rk: (colors[index[sec.names[rk]] % len(colors)],
                 ("-", "--", ":")[(index[sec.names[rk]] // len(colors)) % 3]) for rk in sec.rows}


def _mem_scale(cost: str, label: str, values) -> tuple[float, str]:
    """(factor, axis label) of a cost axis: memory in MB when every value is below 1 GB (as
    the tables show it), else the values as they are."""
    values = [v for v in values if v is not None]
    if cost == "peak_mem_gb" and values and max(values) < 1:
        return 1000.0, "Mem MB"
    return 1.0, label


def _curves(plt, sec, setting, fmt, title):
    labels = split_by_label(sec)
    fig, axes = plt.subplots(1, max(len(labels), 1), figsize=(4.2 * max(len(labels), 1) + 2.8, 4.5),
                             sharey=True, squeeze=False)
    axes = axes[0]
    styles = row_styles(plt, sec)
    handles = {}
    for rk in sec.rows:
        ax = axes[labels.index(rk.label)] if labels else axes[0]
        runs = [r for r in sec.runs[rk] if r["run"]["setting"] == setting and r["results"]["curve"]]
        by_round = defaultdict(list)
        for r in runs:
            for p in r["results"]["curve"]:
                if p["metric"] is not None:
                    by_round[p["round"]].append(p["metric"] * fmt.scale)
        if not by_round:
            continue
        xs = sorted(by_round)
        color, style = styles[rk]
        line, = ax.plot(xs, [mean(by_round[x]) for x in xs], label=sec.names[rk], linewidth=1.4,
                        color=color, linestyle=style, marker="o" if len(xs) < 12 else None, markersize=3)
        if len(runs) > 1:
            ax.fill_between(xs, [min(by_round[x]) for x in xs], [max(by_round[x]) for x in xs],
                            color=color, alpha=0.12, linewidth=0)
        handles.setdefault(sec.names[rk], line)
    from matplotlib.ticker import MaxNLocator

    for i, ax in enumerate(axes):
        ax.set(xlabel="round", title=f"RoC {labels[i]}" if labels else "")
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel(sec.metric + (" (%)" if fmt.percent else ""))
    fig.suptitle(title + ": learning curves (mean over seeds, band: min-max)")
    if handles:
        fig.legend(list(handles.values()), list(handles), fontsize=7, loc="center left",
                   bbox_to_anchor=(1.0, 0.5), ncol=1 if len(handles) <= 24 else 2, frameon=False)
    return fig


def _tier_value(runs, tier: str, cost: str, field: str):
    vals = [r["cost"][cost]["by_tier"][tier][field] for r in runs if tier in r["cost"][cost]["by_tier"]]
    return mean(vals) if vals else None


def _weak(runs, cost, field):
    from fedbench.leaderboard.groups import weak_strong_tiers

    vals = [r["cost"][cost]["by_tier"].get(weak_strong_tiers(r)[0], {}).get(field) for r in runs]
    vals = [v for v in vals if v is not None]
    return mean(vals) if vals else None


#: Markers of the rows off the Pareto front, one per resource label drawn apart; a section with
#: at most _ANNOTATE_ALL points per panel names every point, a larger one only the front.
_OFF_FRONT = ("x", "+", "^", "v", "s", "D")
_ANNOTATE_ALL = 8


def _pareto(plt, sec, setting, fmt, title):
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    names, styles, labels = plot_names(sec), row_styles(plt, sec), split_by_label(sec)
    drawn = set()
    for ax, (label, cost, field) in zip(axes, _TIER_COSTS):
        points = {}
        for rk in sec.rows:
            cell = sec.cells.get((rk, setting))
            runs = [r for r in sec.runs[rk] if r["run"]["setting"] == setting]
            c = _weak(runs, cost, field)
            if cell and c is not None:
                points[rk] = (mean([cell[s] for s in sorted(cell)]), c)
        front = pareto_front(points, higher_quality_better=not fmt.lower_better)
        scale, label = _mem_scale(cost, label, [c for _, c in points.values()])
        points = {rk: (q, c * scale) for rk, (q, c) in points.items()}
        for rk, (q, c) in points.items():
            on = rk in front
            marker = "o" if on else _OFF_FRONT[labels.index(rk.label) % len(_OFF_FRONT) if labels else 0]
            ax.scatter([c], [q], s=40 if on else 22, marker=marker, color=styles[rk][0], zorder=3)
            drawn.add(rk)
            if on or len(points) <= _ANNOTATE_ALL:
                ax.annotate(names[rk], (c, q), fontsize=6, xytext=(3, 3), textcoords="offset points")
        fr = sorted((points[rk][1], points[rk][0]) for rk in front)
        if len(fr) > 1:
            ax.step([c for c, _ in fr], [q for _, q in fr], where="post", color="gray", linewidth=1, zorder=2)
        ax.set(xlabel=f"weakest tier {label}", ylabel=sec.metric + (" (%)" if fmt.percent else ""))
        ax.grid(alpha=0.3)
    fig.suptitle(title + ": quality vs weakest-tier cost (Pareto front: circles, named)")
    from matplotlib.lines import Line2D

    handles = {sec.names[rk]: Line2D([], [], marker="s", linestyle="", color=styles[rk][0])
               for rk in sec.rows if rk in drawn}
    for i, lab in enumerate(labels):
        handles[f"RoC {lab}, off the front"] = Line2D([], [], marker=_OFF_FRONT[i % len(_OFF_FRONT)],
                                                      linestyle="", color="gray")
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5),
               ncol=1 if len(handles) <= 24 else 2, frameon=False)
    return fig


def _tiers(plt, sec, setting, title):
    rows = [rk for rk in sec.rows if any(r["run"]["setting"] == setting for r in sec.runs[rk])]
    tiers = sorted({t for rk in rows for r in sec.runs[rk] for t in r["cost"]["tflops_per_step"]["by_tier"]}, key=int)
    runs = {rk: [r for r in sec.runs[rk] if r["run"]["setting"] == setting] for rk in rows}
    fig, axes = plt.subplots(1, 3, figsize=(13, max(3.6, 1.2 + 0.1 * len(rows) * max(len(tiers), 1))),
                             sharey=True)
    height = 0.8 / max(len(tiers), 1)
    for ax, (label, cost, field) in zip(axes, _TIER_COSTS):
        vals = {tier: [_tier_value(runs[rk], tier, cost, field) for rk in rows] for tier in tiers}
        scale, label = _mem_scale(cost, label, [v for vs in vals.values() for v in vs])
        for j, tier in enumerate(tiers):
            ax.barh([i + (j - (len(tiers) - 1) / 2) * height for i in range(len(rows))],
                    [0.0 if v is None else v * scale for v in vals[tier]], height, label=f"tier {tier}")
        ax.set(xlabel=label)
        ax.grid(alpha=0.3, axis="x")
    names = plot_names(sec)
    axes[0].set_yticks(range(len(rows)), [names[rk] for rk in rows], fontsize=7)
    axes[0].set_ylim(len(rows) - 0.5, -0.5)
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title + ": cost per resource tier (tier 0 = weakest; no bar: the tier does not train)")
    return fig


def plot_section(sec, out_dir: str | Path, multi_metric: bool = False) -> list[Path]:
    """Draw the three plots of every setting of one section; returns the written paths."""
    plt = _pyplot()
    fmt = Fmt(sec.metric)
    folder = Path(out_dir) / sec.task
    paths = []
    for setting in sec.settings:
        stem = file_stem(setting) + (f"-{file_stem(sec.metric)}" if multi_metric else "")
        title = f"{sec.task} / {setting}" + (f" / {sec.metric}" if multi_metric else "")
        paths.append(_save(_curves(plt, sec, setting, fmt, title), folder / f"{stem}_curves.png"))
        paths.append(_save(_pareto(plt, sec, setting, fmt, title), folder / f"{stem}_pareto.png"))
        paths.append(_save(_tiers(plt, sec, setting, title), folder / f"{stem}_tiers.png"))
    return paths


def plot_records(records: list[dict], out_dir: str | Path) -> list[Path]:
    """Plots of every task in ``records`` under ``out_dir``; returns the written paths, sorted."""
    paths = []
    for task in sorted({r["run"]["task"] for r in records}):
        if not _SAFE_TASK.fullmatch(task):
            continue
        _, _, sections = ok_sections(task, records)
        for sec in sections:
            paths += plot_section(sec, out_dir, multi_metric=len(sections) > 1)
    return sorted(paths)
