"""Plots of the leaderboard (``fedbench plot``; needs the ``plot`` extra: matplotlib).

Per task, metric and setting, next to the markdown (``<out>/<task>/<setting>_<kind>.png``;
with several metrics in a task ``<setting>-<metric>_<kind>.png``):

* ``curves``: ``results.curve[*].metric`` against the round, one line per leaderboard row
  (mean over seeds), with a min-max band over seeds;
* ``pareto``: quality of the setting against the weakest tier's TFLOPs/step, its memory and
  the weakest tier's traffic, the Pareto front of each drawn as a step line;
* ``tiers``: per-tier TFLOPs/step, memory and traffic per row (grouped bars).

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

__all__ = ["file_stem", "plot_records", "plot_section"]

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
    fig.savefig(path, dpi=110, metadata={"Software": None})
    _pyplot().close(fig)
    return path


def _curves(plt, sec, setting, fmt, title):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    drawn = 0
    colors = plt.get_cmap("tab20").colors
    for i, rk in enumerate(sec.rows):
        runs = [r for r in sec.runs[rk] if r["run"]["setting"] == setting and r["results"]["curve"]]
        by_round = defaultdict(list)
        for r in runs:
            for p in r["results"]["curve"]:
                if p["metric"] is not None:
                    by_round[p["round"]].append(p["metric"] * fmt.scale)
        if not by_round:
            continue
        xs = sorted(by_round)
        line, = ax.plot(xs, [mean(by_round[x]) for x in xs], label=sec.names[rk], linewidth=1.4,
                        color=colors[i % len(colors)], linestyle=("-", "--", ":")[(i // len(colors)) % 3],
                        marker="o" if len(xs) < 12 else None, markersize=3)
        if len(runs) > 1:
            ax.fill_between(xs, [min(by_round[x]) for x in xs], [max(by_round[x]) for x in xs],
                            color=line.get_color(), alpha=0.15, linewidth=0)
        drawn += 1
    ax.set(xlabel="round", ylabel=sec.metric + (" (%)" if fmt.percent else ""), title=title + ": learning curves")
    ax.grid(alpha=0.3)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if drawn:
        ax.legend(fontsize=7, ncol=2 if drawn > 8 else 1, loc="best")
    return fig


def _tier_value(runs, tier: str, cost: str, field: str):
    vals = [r["cost"][cost]["by_tier"][tier][field] for r in runs if tier in r["cost"][cost]["by_tier"]]
    return mean(vals) if vals else None


def _weak(runs, cost, field):
    from fedbench.leaderboard.groups import weak_strong_tiers

    vals = [r["cost"][cost]["by_tier"].get(weak_strong_tiers(r)[0], {}).get(field) for r in runs]
    vals = [v for v in vals if v is not None]
    return mean(vals) if vals else None


def _pareto(plt, sec, setting, fmt, title):
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, (label, cost, field) in zip(axes, _TIER_COSTS):
        points = {}
        for rk in sec.rows:
            cell = sec.cells.get((rk, setting))
            runs = [r for r in sec.runs[rk] if r["run"]["setting"] == setting]
            c = _weak(runs, cost, field)
            if cell and c is not None:
                points[rk] = (mean([cell[s] for s in sorted(cell)]), c)
        front = pareto_front(points, higher_quality_better=not fmt.lower_better)
        if cost == "peak_mem_gb" and points and max(c for _, c in points.values()) < 1:
            points = {rk: (q, c * 1000) for rk, (q, c) in points.items()}
            label = "Mem MB"
        for rk, (q, c) in points.items():
            on = rk in front
            ax.scatter([c], [q], s=36 if on else 20, marker="o" if on else "x", zorder=3)
            ax.annotate(sec.names[rk], (c, q), fontsize=6, xytext=(3, 3), textcoords="offset points")
        fr = sorted((points[rk][1], points[rk][0]) for rk in front)
        if len(fr) > 1:
            ax.step([c for c, _ in fr], [q for _, q in fr], where="post", color="gray", linewidth=1, zorder=2)
        ax.set(xlabel=f"weakest tier {label}", ylabel=sec.metric + (" (%)" if fmt.percent else ""))
        ax.grid(alpha=0.3)
    fig.suptitle(title + ": quality vs weakest-tier cost (Pareto front: circles)")
    return fig


def _tiers(plt, sec, setting, title):
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    rows = [rk for rk in sec.rows if any(r["run"]["setting"] == setting for r in sec.runs[rk])]
    tiers = sorted({t for rk in rows for r in sec.runs[rk] for t in r["cost"]["tflops_per_step"]["by_tier"]}, key=int)
    width = 0.8 / max(len(tiers), 1)
    for ax, (label, cost, field) in zip(axes, _TIER_COSTS):
        for j, tier in enumerate(tiers):
            vals = []
            for rk in rows:
                v = _tier_value([r for r in sec.runs[rk] if r["run"]["setting"] == setting], tier, cost, field)
                vals.append(0.0 if v is None else v)
            ax.bar([i + (j - (len(tiers) - 1) / 2) * width for i in range(len(rows))], vals, width,
                   label=f"tier {tier}")
        ax.set_xticks(range(len(rows)), [sec.names[rk] for rk in rows], rotation=60, ha="right", fontsize=7)
        ax.set(ylabel=label)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7)
    fig.suptitle(title + ": cost per resource tier (tier 0 = weakest)")
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
