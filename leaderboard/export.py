"""The leaderboard's numbers as CSV and JSON (``fedbench export``).

``per="cell"``: one row per (metric, row, setting) cell, with the same statistics as the
markdown (raw numbers, quality on the displayed scale: x100 for percent metrics) and the
row's costs. ``per="run"``: one row per ok run, with the row it belongs to (``final`` as
recorded, not scaled). Files:
``<out>/<task>.<per>.csv`` and ``<out>/<task>.<per>.json`` (a list of the same rows).
Deterministic: the same records in any order give byte-identical files.

Typed: numbers are numbers, ``variant`` is a mapping of the row's config fields and
``seeds`` a list in the JSON (the CSV holds them as JSON text and space-separated seeds).
Costs keep the record's units, named in the field (``cost_peak_mem_gb``,
``cost_traffic_mb_per_client_round``, ``cost_tflops_per_step``, ``cost_seconds_per_round``);
``peak_mem_source`` says whether memory was ``accounted`` or measured on ``cuda`` (``mixed``
when a row's runs differ). A non-finite number (a t statistic whose paired differences are
all the same, so infinite) is ``null``; ``behind_best`` keeps its verdict.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
from collections import defaultdict
from pathlib import Path

from fedbench.leaderboard.groups import setting_sort_key
from fedbench.leaderboard.output import write_text
from fedbench.leaderboard.render import Fmt
from fedbench.leaderboard.sections import SAFE_TASK, ok_sections
from fedbench.leaderboard.table import COSTS, mem_sources, pareto_rows, quality_table, row_costs
from fedbench.records import load_records, one_line, prepare_out_dir

log = logging.getLogger(__name__)

__all__ = ["PER", "export", "task_rows"]

PER = ("cell", "run")


def _variant(rk) -> dict:
    return {k: json.loads(v) for k, v in rk.variant}


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
            for r in sorted(sec.records, key=lambda r: (sec.row_of(r), setting_sort_key(r["run"]["run_config"]["setting"]),
                                                        r["run"]["run_config"]["seed"], r["run"]["run_id"])):
                rk = sec.row_of(r)
                row = {**base, "row": sec.names[rk], "method": rk.method, "resource_label": rk.label,
                       "variant": _variant(rk), "setting": r["run"]["run_config"]["setting"], "seed": r["run"]["run_config"]["seed"],
                       "run_id": r["run"]["run_id"], "final": r["results"]["final"],
                       "peak_mem_source": r["cost"]["peak_mem_source"]}
                row.update({f"cost_{c.key}": c.read(r) for c in COSTS})
                out.append(row)
            continue
        q = quality_table(sec.rows, sec.settings, sec.cells, lower_better=fmt.lower_better, key=fmt.key)
        costs = row_costs(sec)
        front = pareto_rows(q, costs, lower_better=fmt.lower_better)
        sources = mem_sources(sec)
        for rk in sec.rows:
            for setting in sec.settings:
                cell = q.cells.get((rk, setting))
                if cell is None:
                    continue
                seeds = sorted(sec.cells[(rk, setting)])
                row = {**base, "row": sec.names[rk], "method": rk.method, "resource_label": rk.label,
                       "variant": _variant(rk), "setting": setting, "n": cell.n,
                       "seeds": seeds, "mean": cell.mean, "ci95_half": cell.half,
                       "best": cell.best, "tested_seeds": cell.test.n if cell.test else None,
                       "diff_to_best": cell.test.mean_diff if cell.test else None,
                       "t": cell.test.t if cell.test else None, "behind_best": cell.behind,
                       "row_avg": q.avgs.get(rk), "pareto": rk in front, "peak_mem_source": sources[rk]}
                row.update({f"cost_{c.key}": costs[rk][c.name] for c in COSTS})
                out.append(row)
    return out


def _json_safe(v):
    """``v`` with every non-finite float (also inside a variant) as None."""
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _csv_value(v) -> str:
    if v is None:
        return ""
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    if isinstance(v, list):
        return " ".join(str(x) for x in v)
    return v


def _csv(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _csv_value(_json_safe(r.get(k))) for k in cols})
    return buf.getvalue()


def export(records_root: str | os.PathLike, out_dir: str | os.PathLike, per: str = "cell") -> list[Path]:
    """Write ``<out_dir>/<task>.<per>.csv`` and ``.json`` for every task; returns the paths, sorted."""
    records = load_records(records_root)
    by_task: dict = defaultdict(list)
    for r in records:
        by_task[r["run"]["task"]].append(r)
    for task in sorted(by_task):
        if not SAFE_TASK.fullmatch(task):
            log.warning("skipping task %s: not usable as a file name", one_line(repr(task)))
            del by_task[task]
    if not by_task:
        return []
    out = prepare_out_dir(out_dir)
    paths = []
    for task in sorted(by_task):
        rows = task_rows(task, by_task[task], per)
        paths.append(write_text(out / f"{task}.{per}.csv", _csv(rows)))
        text = json.dumps([{k: _json_safe(v) for k, v in r.items()} for r in rows], indent=1, allow_nan=False)
        paths.append(write_text(out / f"{task}.{per}.json", text + "\n"))
    return sorted(paths)
