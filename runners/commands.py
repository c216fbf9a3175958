"""``fedbench run`` and ``fedbench sweep``: from the command line to records.

Both build every run's :class:`~fedbench.runners.spec.RunSpec` first (every config
validated, one line and exit 2 on the first problem, nothing trained), skip the runs whose
finished (``ok``) record exists, and run the rest with a progress bar.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

from fedbench.configs import flag_fields
from fedbench.errors import UserError
from fedbench.runners.callbacks import Callback

if TYPE_CHECKING:
    from fedbench.runners.spec import RunSpec


def gather_configs(args) -> tuple[dict, dict, dict]:
    """run / method / task overrides from --config, flags and --set (later wins)."""
    from fedbench.config import SECTIONS, load_yaml_config, parse_overrides

    cfg: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    if args.config:
        for s, v in load_yaml_config(args.config).items():
            cfg[s].update(v)
    for section, f in flag_fields():
        value = getattr(args, f"{section}.{f.name}", None)
        if value is not None:
            cfg[section][f.name] = value
    for s, v in parse_overrides(args.set).items():
        cfg[s].update(v)
    return cfg["run"], cfg["method"], cfg["task"]


def load_callback(ref: str) -> Callback:
    """``module:Class`` -> an instance of that :class:`Callback` subclass (no arguments)."""
    mod_name, _, cls_name = ref.partition(":")
    if not mod_name or not cls_name:
        raise UserError(f"bad --callback {ref!r}: expected MODULE:CLASS, e.g. mypkg.logging:Logger")
    try:
        obj = getattr(importlib.import_module(mod_name), cls_name)
    except ImportError as e:
        raise UserError(f"--callback {ref}: cannot import {mod_name!r} ({e})") from None
    except AttributeError:
        raise UserError(f"--callback {ref}: module {mod_name!r} has no {cls_name!r}") from None
    if not (isinstance(obj, type) and issubclass(obj, Callback)):
        raise UserError(f"--callback {ref}: {cls_name} is not a fedbench Callback subclass")
    return obj()


def summary_line(rec: dict, path: Path) -> str:
    run, res, cost = rec["run"], rec["results"], rec["cost"]

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    head = f"{run['method']} on {run['task']} [{run['setting']}, {run['resource_label']}, seed {run['seed']}]"
    if rec["status"] != "ok":
        return f"{head}: {rec['status'].upper()} after {run['rounds_completed']}/{run['rounds']} rounds: {rec['error']} -> {path}"
    best = f"best {f(res['best'], '.4f')} @ r{res['best_round']}" if res["best"] is not None else ""
    if res.get("initial"):
        best += f", initial {f(res['initial']['metric'], '.4f')}"
    return (f"{head}: {res['metric_name']} {f(res['final'], '.4f')} ({best}) | "
            f"{f(cost['tflops_per_step']['mean'], '.3g')} TFLOPs/step | {f(cost['peak_mem_gb']['mean'], '.3g')} GB "
            f"({cost['peak_mem_source']}) | {f(cost['traffic_mb_per_client_round']['total'], '.3g')} MB/client-round | "
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


def execute(spec: "RunSpec", progress: bool, callbacks: list[Callback] | None = None,
            data_cache: dict | None = None) -> tuple[dict, Path]:
    """Run one experiment with a progress bar. ``data_cache`` (a sweep's) keeps the last
    loaded task data, keyed by task and task config, so the next run of the same task in
    this process does not load (read, tokenize) it again."""
    if not progress:
        os.environ["TQDM_DISABLE"] = "1"  # plain tqdm bars (GGUF conversion); read when tqdm is imported
    quiet_library_bars()
    from fedbench.runners.experiment import Experiment
    from fedbench.runners.progress import ProgressBar

    key = json.dumps([spec.task, spec.configs(("result", "axis", "record", "runtime"))["task"]], sort_keys=True,
                     default=str)
    data = None if data_cache is None else data_cache.get(key)
    bar = ProgressBar(f"{spec.method}/{spec.task}") if progress else None
    try:
        exp = Experiment(spec, callbacks=([bar] if bar else []) + list(callbacks or []), data=data)
        out = exp.run()
    finally:
        if bar is not None:
            bar.close()
    if data_cache is not None and exp.data is not None:
        data_cache.clear()  # one task's data at a time
        data_cache[key] = exp.data
    return out


def exit_status(rec: dict) -> int:
    return {"ok": 0, "failed": 1, "cancelled": 130}[rec["status"]]


def cmd_run(args) -> int:
    from fedbench.records import is_finished, prepare_out_dir
    from fedbench.runners.spec import build_spec

    run, method_cfg, task_cfg = gather_configs(args)
    spec = build_spec(args.method, args.task, run, method_cfg, task_cfg)
    callbacks = [load_callback(ref) for ref in args.callback]
    prepare_out_dir(spec.run.out)
    path = spec.record_path()
    if is_finished(path) and not args.force:
        print(f"{spec.method} on {spec.task}: done already ({path}); --force runs it again")
        return 0
    rec, path = execute(spec, not args.no_progress, callbacks)
    print(summary_line(rec, path))
    return exit_status(rec)


def cmd_sweep(args) -> int:
    """Load, expand and validate the whole preset (``runners/sweep.py``), then run what is not done."""
    from fedbench.records import prepare_out_dir
    from fedbench.runners import sweep

    runs = sweep.load_sweep(args.preset, out=args.out)
    for out in dict.fromkeys(r.spec.run.out for r in runs):
        prepare_out_dir(out, create=not args.dry_run)
    warn = lambda line: print(f"fedbench: warning: {line}", file=sys.stderr)  # noqa: E731
    parallel = args.workers is not None or args.address is not None
    if parallel and not args.dry_run:
        from fedbench.runners.ray_sweep import run_sweep

        return run_sweep(runs, args, warn)
    done = failed = 0
    data_cache: dict = {}
    for i, r in enumerate(runs, 1):
        label = f"[{i}/{len(runs)}] {r.label}"
        path = r.spec.record_path()
        if sweep.is_done(path, warn):
            print(f"{label}: done ({path})")
            done += 1
            continue
        if args.dry_run:
            print(f"{label}: to run")
            continue
        rec, path = execute(r.spec, not args.no_progress, data_cache=data_cache)
        print(f"{label}: {summary_line(rec, path)}")
        if rec["status"] == "cancelled":
            return 130
        failed += rec["status"] != "ok"
    print(f"sweep: {len(runs)} runs, {done} already done, {failed} failed")
    return 1 if failed else 0


__all__ = ["cmd_run", "cmd_sweep", "execute", "gather_configs", "load_callback", "summary_line"]
