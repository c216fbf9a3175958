"""The leaderboard's numbers as CSV and JSON (``fedbench export``).

``per="cell"``: one row per (metric, row, setting) cell, with the same statistics as the
markdown and the row's costs. ``per="run"``: one row per ok run, with the row it belongs
to. Files: ``<out>/<task>.<per>.csv`` and ``<out>/<task>.<per>.json`` (a list of the same
rows). Deterministic: the same records in any order give byte-identical files.

One unit per quantity, named in the column, in both files and both ``per``:

* metric values on the tables' scale: x100 for the metrics the tables show in percent,
  with ``_pct`` in the column's name (``mean_pct``, ``ci95_half_pct``, ``diff_to_best_pct``,
  ``row_avg_pct``; per run ``final_pct``), the metric's own value otherwise (``mean``, ...);
* sizes in MB (10**6 bytes, as the tables' sizes below 1 GB): ``cost_peak_mem_mb``,
  ``cost_traffic_mb_per_client_round`` (the records keep memory in GB; it is converted);
* ``cost_tflops_per_step`` in TFLOPs, ``cost_seconds_per_round`` in seconds.

Typed: numbers are numbers, ``variant`` is a mapping of the row's config fields and
``seeds`` a list in the JSON (the CSV holds them as JSON text and space-separated seeds).
``peak_mem_source`` says whether memory was ``accounted`` or measured on ``cuda`` (``mixed``
when a row's runs differ). A non-finite number (a t statistic whose paired differences are
all the same, so infinite) is ``null``; ``behind_best`` keeps its verdict.

The files never go into a records tree (JSON files there would be read as broken records):
the default ``out`` is a folder beside the records (``<records>-export``), and an ``out``
inside the records folder is refused.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

from fedbench.errors import UserError
from fedbench.leaderboard.groups import setting_sort_key
from fedbench.leaderboard.output import write_text
from fedbench.outfiles import check_output
from fedbench.leaderboard.render import Fmt
from fedbench.leaderboard.sections import by_file_task, ok_sections
from fedbench.leaderboard.table import COSTS, mem_sources, pareto_rows, quality_table, row_costs
from fedbench.units import GB, MB
from fedbench.records import load_records, one_line, prepare_out_dir


__all__ = ["PER", "default_out", "export", "task_rows"]

PER = ("cell", "run")


def _variant(rk) -> dict:
    return {k: json.loads(v) for k, v in rk.variant}


def _cost_columns(read) -> dict:
    """{column: value} of the cost columns, sizes in MB (see the module docstring); ``read(cost)``
    gives a :class:`~fedbench.leaderboard.table.Cost`'s value in the record's unit."""
    out = {}
    for c in COSTS:
        v = read(c)
        if c.unit == "gb":
            out[f"cost_{c.key.replace('_gb', '_mb')}"] = None if v is None else v * GB / MB
        else:
            out[f"cost_{c.key}"] = v
    return out


def task_rows(task: str, records: list[dict], per: str = "cell") -> list[dict]:
    """The export rows of one task (see the module docstring)."""
    if per not in PER:
        raise ValueError(f"per must be one of {PER}, got {per!r}")
    _, _, sections = ok_sections(task, records)
    out = []
    for sec in sections:
        fmt = Fmt(sec.metric)
        unit = "_pct" if fmt.percent else ""

        def shown(v):
            return None if v is None else v * fmt.scale

        base = {"task": task, "metric": sec.metric}
        if per == "run":
            for r in sorted(sec.records, key=lambda r: (sec.row_of(r),
                                                        setting_sort_key(r["run"]["run_config"]["setting"]),
                                                        r["run"]["run_config"]["seed"], r["run"]["run_id"])):
                rk = sec.row_of(r)
                row = {**base, "row": sec.names[rk], "method": rk.method, "resource_label": rk.label,
                       "variant": _variant(rk), "setting": r["run"]["run_config"]["setting"],
                       "seed": r["run"]["run_config"]["seed"], "run_id": r["run"]["run_id"],
                       f"final{unit}": shown(r["results"]["final"]), "peak_mem_source": r["cost"]["peak_mem_source"]}
                row.update(_cost_columns(lambda c: c.read(r)))
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
                       "seeds": seeds, f"mean{unit}": cell.mean, f"ci95_half{unit}": cell.half,
                       "best": cell.best, "tested_seeds": cell.test.n if cell.test else None,
                       f"diff_to_best{unit}": cell.test.mean_diff if cell.test else None,
                       "t": cell.test.t if cell.test else None, "behind_best": cell.behind,
                       f"row_avg{unit}": q.avgs.get(rk), "pareto": rk in front, "peak_mem_source": sources[rk]}
                row.update(_cost_columns(lambda c: costs[rk][c.name]))
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


def default_out(records_root: str | os.PathLike) -> Path:
    """Where ``fedbench export`` writes by default: a folder beside the records,
    ``<records>-export`` (``results`` -> ``results-export``)."""
    root = Path(records_root)
    return root.parent / f"{root.name}-export"


def _outside_records(records_root: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """A :class:`~fedbench.errors.UserError` when ``out_dir`` is the records folder or inside it."""
    root, out = Path(records_root).resolve(), Path(out_dir).resolve()
    if root.is_dir() and (out == root or root in out.parents):
        raise UserError(f"--out {one_line(str(out_dir))} is inside the records folder {one_line(str(records_root))}: "
                        "its JSON files would be read as records; write beside it (default: "
                        f"{one_line(str(default_out(records_root)))})")


def export(records_root: str | os.PathLike, out_dir: str | os.PathLike | None = None,
           per: str = "cell") -> list[Path]:
    """Write ``<out_dir>/<task>.<per>.csv`` and ``.json`` for every task; returns the paths,
    sorted. ``out_dir``: default :func:`default_out`; never inside the records folder."""
    out_dir = default_out(records_root) if out_dir is None else out_dir
    _outside_records(records_root, out_dir)
    records = load_records(records_root)
    by_task = by_file_task(records)
    if not by_task:
        return []
    out = prepare_out_dir(out_dir)
    for task in sorted(by_task):  # every file's place checked before the first is written
        for ext in ("csv", "json"):
            check_output(out / f"{task}.{per}.{ext}", out)
    paths = []
    for task in sorted(by_task):
        rows = task_rows(task, by_task[task], per)
        paths.append(write_text(out / f"{task}.{per}.csv", _csv(rows)))
        text = json.dumps([{k: _json_safe(v) for k, v in r.items()} for r in rows], indent=1, allow_nan=False)
        paths.append(write_text(out / f"{task}.{per}.json", text + "\n"))
    return sorted(paths)
