"""Launching one run: the spec goes in, a record comes out, with a progress bar.

Shared by ``fedbench run``, ``fedbench sweep`` (in-process and on Ray workers) and the
Python API (:func:`fedbench.run`).
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fedbench.units import GB, MB, format_bytes
from fedbench.runners.outputs.callbacks import Callback

if TYPE_CHECKING:
    from fedbench.runners.core.spec import RunSpec


def summary_line(rec: dict, path: Path) -> str:
    run, res, cost = rec["run"], rec["results"], rec["cost"]
    rc = run["run_config"]

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    head = f"{run['method']} on {run['task']} [{rc['setting']}, {run['resource_label']}, seed {rc['seed']}]"
    if rec["status"] != "ok":
        return f"{head}: {rec['status'].upper()} after {run['rounds_completed']}/{rc['rounds']} rounds: {rec['error']} -> {path}"
    best = f"best {f(res['best'], '.4f')} @ r{res['best_round']}" if res["best"] is not None else ""
    if res.get("initial"):
        best += f", initial {f(res['initial']['metric'], '.4f')}"
    mem = cost["peak_mem_gb"]["mean"]
    traffic = cost["traffic_mb_per_client_round"]["total"]
    return (f"{head}: {res['metric_name']} {f(res['final'], '.4f')} ({best}) | "
            f"{f(cost['tflops_per_step']['mean'], '.3g')} TFLOPs/step | "
            f"{format_bytes(None if mem is None else mem * GB)} peak memory ({cost['peak_mem_source']}) | "
            f"{format_bytes(None if traffic is None else traffic * MB)}/client-round | "
            f"{f(cost['seconds_per_round'], '.3g')} s/round -> {path}")


def quiet_library_bars() -> None:
    """Silence the weight-loading / GGUF bars of the HF libraries (always: the run has its
    own bar); --no-progress also silences plain tqdm."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for mod, fn in (("transformers.utils.logging", "disable_progress_bar"),
                    ("datasets.utils.logging", "disable_progress_bar")):
        try:
            getattr(importlib.import_module(mod), fn)()
        except ImportError:
            pass


def execute(spec: RunSpec, progress: bool, callbacks: list[Callback] | None = None,
            data_cache: dict | None = None) -> tuple[dict, Path]:
    """Run one experiment with a progress bar. ``data_cache`` (a sweep's) keeps the last
    loaded task data, keyed by task and task config, so the next run of the same task in
    this process does not load (read, tokenize) it again. The run's trackers (``run.log``:
    :mod:`~fedbench.runners.outputs.tracking`) come before ``callbacks``."""
    from fedbench.runners.outputs.tracking import trackers_for

    trackers = trackers_for(spec.run.log)  # a missing package: one line, before anything loads
    if not progress:
        os.environ["TQDM_DISABLE"] = "1"  # plain tqdm bars (GGUF conversion); read when tqdm is imported
    quiet_library_bars()
    from fedbench.runners.core.experiment import Experiment
    from fedbench.runners.cli.progress import ProgressBar

    key = json.dumps([spec.task, spec.configs(("result", "axis", "record", "runtime"))["task"]], sort_keys=True,
                     default=str)
    data = None if data_cache is None else data_cache.get(key)
    bar = ProgressBar(f"{spec.method}/{spec.task}") if progress else None
    try:
        exp = Experiment(spec, callbacks=([bar] if bar else []) + trackers + list(callbacks or []), data=data)
        out = exp.run()
    finally:
        if bar is not None:
            bar.close()
    if data_cache is not None and exp.data is not None:
        data_cache.clear()  # one task's data at a time
        data_cache[key] = exp.data
    return out


__all__ = ["execute", "quiet_library_bars", "summary_line"]
