"""Budget tables and the score-against-simulated-time plot, from ``--devices`` records.

* **Quality under budget**: per method and device mix, the score of the last evaluated
  round that ends within a fixed simulated time (and, apart, within a fixed traffic). The
  budgets are the shortest run's: the smallest total simulated time (total traffic) over
  the rows, so every row has a score at them. Mean over seeds.
* **Cost to target**: per method and device mix with ``run.target_metric``: the round,
  simulated seconds and traffic until the target was first reached (runs that never
  reached it are counted, not averaged).

Only records whose rounds carry simulated time (``run.devices``) enter: a tier run
(``--roc``) has no device and never shares these tables.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

from fedbench.leaderboard.output import file_stem, save_png
from fedbench.leaderboard.render import esc

__all__ = ["budget_lines", "cumulative", "plot_simtime", "score_within"]


def _timed(records: Sequence[dict]) -> list[dict]:
    return [r for r in records if r["status"] == "ok" and r["run"].get("devices")
            and r["results"]["curve"] and all(p.get("sim_seconds") is not None for p in r["results"]["curve"])]


def cumulative(curve: Sequence[dict], key: str) -> list[float]:
    """Running totals of ``key`` (``sim_seconds`` or ``traffic_mb``) over the rounds."""
    out, total = [], 0.0
    for p in curve:
        total += p.get(key) or 0.0
        out.append(total)
    return out


def score_within(curve: Sequence[dict], key: str, budget: float) -> float | None:
    """The metric of the last evaluated round whose running total of ``key`` is within
    ``budget`` (None: no evaluated round ends within it)."""
    best = None
    for p, total in zip(curve, cumulative(curve, key)):
        if total <= budget * (1 + 1e-12) and p["metric"] is not None:
            best = p["metric"]
    return best


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _groups(recs: Sequence[dict]) -> dict[tuple[str, str, str], list[dict]]:
    g: dict = defaultdict(list)
    for r in recs:
        g[(r["run"]["run_config"]["setting"], r["run"]["resource_label"], r["run"]["method"])].append(r)
    return dict(sorted(g.items()))


def _fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def budget_lines(records: Sequence[dict]) -> list[str]:
    """The two tables as markdown lines (empty when no record has simulated time)."""
    recs = _timed(records)
    if not recs:
        return []
    t_budget = min(cumulative(r["results"]["curve"], "sim_seconds")[-1] for r in recs)
    b_budget = min(cumulative(r["results"]["curve"], "traffic_mb")[-1] for r in recs)
    lines = ["", "## Quality under budget", "",
             f"Score of the last evaluated round that ends within {t_budget:.4g} simulated seconds and, apart, within "
             f"{b_budget:.4g} MB of traffic (the shortest run's totals), mean over seeds. Simulated: each round "
             "lasts as long as its slowest client's measured FLOPs and bytes at its device's rates (`run.devices`).",
             "", "| setting | devices | method | runs | score @ time | score @ traffic |", "|---|---|---|---|---|---|"]
    for (setting, label, method), rs in _groups(recs).items():
        lines.append(f"| {esc(setting)} | {esc(label)} | {esc(method)} | {len(rs)} | "
                     f"{_fmt(_mean(score_within(r['results']['curve'], 'sim_seconds', t_budget) for r in rs), '.4f')} | "
                     f"{_fmt(_mean(score_within(r['results']['curve'], 'traffic_mb', b_budget) for r in rs), '.4f')} |")
    targeted = [r for r in recs if r["results"].get("target")]
    if targeted:
        lines += ["", "## Cost to target", "",
                  "Until the first evaluated round whose score reaches `run.target_metric`: rounds, simulated seconds "
                  "and traffic (mean over the runs that reached it).", "",
                  "| setting | devices | method | target | reached | round | simulated s | traffic MB |",
                  "|---|---|---|---|---|---|---|---|"]
        for (setting, label, method), rs in _groups(targeted).items():
            hit = [r["results"]["target"] for r in rs if r["results"]["target"]["reached"]]
            goal = rs[0]["results"]["target"]["metric"]
            lines.append(f"| {esc(setting)} | {esc(label)} | {esc(method)} | {goal:g} | {len(hit)}/{len(rs)} | "
                         f"{_fmt(_mean(t['round'] for t in hit), '.1f')} | "
                         f"{_fmt(_mean(t.get('sim_seconds') for t in hit), '.4g')} | "
                         f"{_fmt(_mean(t['traffic_mb'] for t in hit), '.4g')} |")
    return lines


def plot_simtime(plt, records: Sequence[dict], task: str, out_dir: str | Path) -> list[Path]:
    """Per setting: each run's score against cumulative simulated seconds,
    ``<out>/<task>/<setting>_simtime.png``."""

    recs = [r for r in _timed(records) if r["run"]["task"] == task]
    by_setting: dict = defaultdict(list)
    for r in recs:
        by_setting[r["run"]["run_config"]["setting"]].append(r)
    paths = []
    for setting, rs in sorted(by_setting.items()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in sorted(rs, key=lambda r: (r["run"]["method"], r["run"]["resource_label"],
                                           r["run"]["run_config"]["seed"])):
            curve = r["results"]["curve"]
            pts = [(t, p["metric"]) for p, t in zip(curve, cumulative(curve, "sim_seconds")) if p["metric"] is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=f"{r['run']['method']} ({r['run']['resource_label']}, "
                                                       f"seed {r['run']['run_config']['seed']})")
        ax.set_xlabel("simulated seconds (measured FLOPs and bytes at the devices' rates)")
        ax.set_ylabel(recs[0]["results"]["metric_name"])
        ax.set_title(f"{task}, {setting}: score against simulated time")
        ax.legend(fontsize=6)
        paths.append(save_png(plt, fig, Path(out_dir) / task / f"{file_stem(setting)}_simtime.png", Path(out_dir)))
    return paths
