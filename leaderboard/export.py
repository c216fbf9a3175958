"""The leaderboard's numbers as CSV and JSON (``fedbench export``).

``per="cell"``: one row per (metric, row, setting) cell, with the same statistics as the
markdown (raw numbers, quality on the displayed scale: x100 for percent metrics) and the
row's costs. ``per="run"``: one row per ok run, with the row it belongs to (``final`` as
recorded, not scaled). Files:
``<out>/<task>.<per>.csv`` and ``<out>/<task>.<per>.json`` (a list of the same rows).
Deterministic: the same records in any order give byte-identical files.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import defaultdict
from pathlib import Path

from fedbench.leaderboard.generate import _SAFE_TASK, ok_sections
from fedbench.leaderboard.generate import setting_sort_key as setting_key
from fedbench.leaderboard.render import Fmt
from fedbench.leaderboard.table import COSTS, pareto_rows, quality_table, row_costs
from fedbench.records import atomic_write_text, load_records

__all__ = ["PER", "export", "task_rows"]

PER = ("cell", "run")


def _cost_key(name: str) -> str:
    return "cost_" + name.lower().replace("/", "_per_").replace(" ", "_")


def _variant(rk) -> str:
    return json.dumps({k: json.loads(v) for k, v in rk.variant}, sort_keys=True)


def task_rows(task: str, records: list[dict], per: str = "cell") -> list[dict]:
    """The export rows of one task (see the module docstring)."""
    if per not in PER:
        raise ValueError(f"per must be one of {PER}, got {per!r}")
    _, _, sections = ok_sections(task, records)
    out = []
    for sec in sections:
        fmt = Fmt(sec.metric)
        base = {"task": task, "metric": sec.metric}
        if per == "run":
            for r in sorted(sec.records, key=lambda r: (sec.row_of(r), setting_key(r["run"]["setting"]),
                                                        r["run"]["seed"], r["run"]["run_id"])):
                rk = sec.row_of(r)
                row = {**base, "row": sec.names[rk], "method": rk.method, "resource_label": rk.label,
                       "variant": _variant(rk), "setting": r["run"]["setting"], "seed": r["run"]["seed"],
                       "run_id": r["run"]["run_id"], "final": r["results"]["final"]}
                row.update({_cost_key(n): read(r) for n, read, _ in COSTS})
                out.append(row)
            continue
        q = quality_table(sec.rows, sec.settings, sec.cells, lower_better=fmt.lower_better, key=fmt.key)
        costs = row_costs(sec)
        front = pareto_rows(q, costs, lower_better=fmt.lower_better)
        for rk in sec.rows:
            for setting in sec.settings:
                cell = q.cells.get((rk, setting))
                if cell is None:
                    continue
                seeds = sorted(sec.cells[(rk, setting)])
                row = {**base, "row": sec.names[rk], "method": rk.method, "resource_label": rk.label,
                       "variant": _variant(rk), "setting": setting, "n": cell.n,
                       "seeds": " ".join(str(s) for s in seeds), "mean": cell.mean, "ci95_half": cell.half,
                       "best": cell.best, "tested_seeds": cell.test.n if cell.test else None,
                       "diff_to_best": cell.test.mean_diff if cell.test else None,
                       "t": cell.test.t if cell.test else None, "behind_best": cell.behind,
                       "row_avg": q.avgs.get(rk), "pareto": rk in front}
                row.update({_cost_key(n): costs[rk][n] for n, _, _ in COSTS})
                out.append(row)
    return out


def _json_safe(v):
    if isinstance(v, float) and v != v:
        return None
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return v


def _csv(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r.get(k) is None else r[k] for k in cols})
    return buf.getvalue()


def export(records_root: str | os.PathLike, out_dir: str | os.PathLike, per: str = "cell") -> list[Path]:
    """Write ``<out_dir>/<task>.<per>.csv`` and ``.json`` for every task; returns the paths, sorted."""
    records = load_records(records_root)
    by_task: dict = defaultdict(list)
    for r in records:
        by_task[r["run"]["task"]].append(r)
    paths = []
    for task in sorted(by_task):
        if not _SAFE_TASK.fullmatch(task):
            continue
        rows = task_rows(task, by_task[task], per)
        out = Path(out_dir)
        paths.append(atomic_write_text(out / f"{task}.{per}.csv", _csv(rows)))
        text = json.dumps([{k: _json_safe(v) for k, v in r.items()} for r in rows], indent=1, allow_nan=False)
        paths.append(atomic_write_text(out / f"{task}.{per}.json", text + "\n"))
    return sorted(paths)
