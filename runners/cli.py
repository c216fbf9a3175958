"""``fedbench``: list, run, sweep, leaderboard, plot, export, compare.

Bad input (unknown method/task/setting, malformed --roc, unknown --set keys, a value out
of range, an unwritable --out, an invalid sweep preset, ...) ends with a one-line
``fedbench: error: ...`` and exit status 2, never a traceback, and before anything is
trained: every config is validated (``runners/config.py: validate_run``) and the output
directory created and checked first.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from fedbench.errors import UserError

log = logging.getLogger("fedbench")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise UserError(message)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", required=True, help="method key (see `fedbench list methods`)")
    p.add_argument("--task", required=True, help="task key (see `fedbench list tasks`)")
    p.add_argument("--setting", help="data split: iid, dir(a), k/a, k/-, domain, domain+dir(a)xm, k/Dd")
    p.add_argument("--roc", help="ratio of resource tiers, e.g. 6:3:1 (budgets 1/2, 3/4, all layers)")
    p.add_argument("--capacities", help="per-client layer budgets, e.g. 12,10,8,6,4,3")
    p.add_argument("--dynamic", action="store_true", default=None, help="redraw budgets every round")
    p.add_argument("--clients", type=int, help="number of clients")
    p.add_argument("--per-round", type=int, help="clients sampled per round")
    p.add_argument("--rounds", type=int, help="communication rounds")
    p.add_argument("--local-epochs", type=int, help="local epochs per round")
    p.add_argument("--max-steps", type=int, help="cap on local steps per client per round")
    p.add_argument("--batch-size", type=int, help="local batch size")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], help="local optimizer")
    p.add_argument("--lr", type=float, help="local learning rate")
    p.add_argument("--seed", type=int, help="seed")
    p.add_argument("--device", help="auto (CUDA if present), cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, help="torch threads of the run (default: 1 for tiny tasks, else the "
                   "cores given to the process)")
    p.add_argument("--runner", help="engine that runs the clients: local (default) or ray (needs the [ray] extra)")
    p.add_argument("--workers", type=int, help="Ray actors running the clients (--runner ray)")
    p.add_argument("--eval-initial", action="store_true", default=None,
                   help="also evaluate the model before round 1 (the un-tuned baseline) into the record")
    p.add_argument("--data-dir", help="local data directory for the task (offline path)")
    p.add_argument("--model", help="model: alias, HF id, timm name or local path")
    p.add_argument("--config", help="YAML file with sections run / method / task")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field: method.t_rgd=2, task.seq_len=128, lr=0.01 (run)")
    p.add_argument("--out", help="directory of result records (default: results)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


RUN_FLAGS = ("setting", "roc", "capacities", "dynamic", "clients", "per_round", "rounds", "local_epochs",
             "max_steps", "batch_size", "optimizer", "lr", "seed", "device", "threads", "eval_initial", "out", "runner",
             "workers")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fedbench", description="Benchmark suite for heterogeneous federated PEFT")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    ls = sub.add_parser("list", help="list methods and tasks with one-line descriptions")
    ls.add_argument("what", nargs="?", choices=["methods", "tasks", "all"], default="all")
    ls.add_argument("--fields", action="store_true", help="also list every config field with its default and help")
    run = sub.add_parser("run", help="run one method on one task and write a result record")
    _add_run_options(run)
    sw = sub.add_parser("sweep", help="run methods x settings x resources x seeds from a YAML preset (skips done runs)")
    sw.add_argument("preset", help="YAML preset (see benchmarks/)")
    sw.add_argument("--out", help="records directory (overrides the preset)")
    sw.add_argument("--dry-run", action="store_true", help="list the runs and whether they are done")
    sw.add_argument("--no-progress", action="store_true")
    sw.add_argument("--workers", type=int, help="run up to N runs at once as Ray tasks on a local Ray instance "
                    "(needs the [ray] extra; default: one after another in this process)")
    sw.add_argument("--address", help="join the Ray cluster at ADDR (e.g. 10.0.0.1:6379, or auto) instead of "
                    "starting a local instance")
    sw.add_argument("--cpus-per-run", type=float, help="CPU cores each run asks Ray for, and its torch threads "
                    "(default 1)")
    sw.add_argument("--gpus-per-run", type=float, help="GPUs each run asks Ray for; fractions share a GPU "
                    "(default: 1 where the machine or cluster has GPUs, else 0)")
    lb = sub.add_parser("leaderboard", help="write <out>/<task>.md leaderboards from result records "
                        "(committed tables: --records leaderboard/records --out leaderboard)")
    lb.add_argument("--records", default="results", help="records directory (default: results)")
    lb.add_argument("--out", default="results/leaderboard", help="output directory (default: results/leaderboard)")
    lb.add_argument("--plots", action="store_true", help="also draw the plots (needs matplotlib) and link them")
    pl = sub.add_parser("plot", help="draw learning curves, quality-vs-cost and per-tier cost plots (needs matplotlib)")
    pl.add_argument("--records", default="results", help="records directory (default: results)")
    pl.add_argument("--out", default="results/leaderboard", help="output directory (default: results/leaderboard)")
    ex = sub.add_parser("export", help="the leaderboard tables as CSV and JSON")
    ex.add_argument("--records", default="results", help="records directory (default: results)")
    ex.add_argument("--out", default="results/leaderboard", help="output directory (default: results/leaderboard)")
    ex.add_argument("--per", choices=["cell", "run"], default="cell", help="one row per cell (default) or per run")
    cp = sub.add_parser("compare", help="paired t-tests of methods against others, per resource label and "
                        "setting, with Holm-adjusted p-values (a paper's 'A beats B' claim)")
    cp.add_argument("methods", nargs="+", metavar="METHOD", help="methods A")
    cp.add_argument("--against", nargs="+", required=True, metavar="METHOD", help="methods B to test A against")
    cp.add_argument("--task", required=True, help="task whose records to compare")
    cp.add_argument("--records", default="results", help="records directory (default: results)")
    return p


# ------------------------------------------------------------------------------ list
def _list_sources() -> list[Path]:
    """The source files whose code can change what ``fedbench list`` prints."""
    import importlib.util

    import fedbench

    files = []
    for pkg in ("fedbench.methods", "fedbench.tasks", "fedbench.runners"):
        spec = importlib.util.find_spec(pkg)  # imports fedbench only, not the package itself
        for d in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(Path(d).glob("*.py"))
    return files + sorted(Path(fedbench.__file__).parent.glob("*.py"))


def _list_cache_path() -> Path | None:
    """Where the listing of this exact code is kept (start-up without importing torch):
    a hash of every source file's path, size and mtime; None when it cannot be computed."""
    import hashlib

    import fedbench

    if os.environ.get("FEDBENCH_NO_LIST_CACHE"):
        return None
    try:
        h = hashlib.sha256(f"{fedbench.__version__} {sys.version}".encode())
        for f in _list_sources():
            st = f.stat()
            h.update(f"{f} {st.st_size} {st.st_mtime_ns}\n".encode())
    except (OSError, ImportError, ValueError):
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedbench"
    return base / f"list-{h.hexdigest()[:20]}.json"


def _list_entries() -> dict:
    """{registry: [[key, description, aliases, [[field, repr(default), help], ...]], ...]}."""
    import json

    path = _list_cache_path()
    if path is not None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    from fedbench.config import describe_fields
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    entries = {name: [[e.key, e.description, list(e.aliases),
                       [[n, repr(d), h] for n, d, h in describe_fields(e.obj.config_cls)]] for e in reg.entries()]
               for name, reg in (("methods", METHODS), ("tasks", TASKS))}
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries))
            os.replace(tmp, path)
        except OSError:
            pass
    return entries


def cmd_list(args) -> int:
    entries = _list_entries()

    def show(title, rows):
        print(f"{title}:")
        width = max(len(r[0]) for r in rows)
        for key, description, aliases, fields in rows:
            alias = f" (alias: {', '.join(aliases)})" if aliases else ""
            print(f"  {key:<{width}}  {description}{alias}")
            if args.fields:
                for name, default, help_ in fields:
                    print(f"  {'':<{width}}    {name} = {default}: {help_}")

    if args.what in ("methods", "all"):
        show("methods (--method; fields: --set method.FIELD=VALUE)", entries["methods"])
    if args.what in ("tasks", "all"):
        show("tasks (--task; fields: --set task.FIELD=VALUE)", entries["tasks"])
    return 0


# ------------------------------------------------------------------------------- run
def gather_configs(args) -> tuple[dict, dict, dict]:
    """run / method / task overrides from --config, flags and --set (later wins)."""
    from fedbench.config import SECTIONS, load_yaml_config, parse_overrides

    cfg: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    if args.config:
        for s, v in load_yaml_config(args.config).items():
            cfg[s].update(v)
    for name in RUN_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            cfg["run"][name] = value
    if getattr(args, "data_dir", None) is not None:
        cfg["task"]["data_dir"] = args.data_dir
    if getattr(args, "model", None) is not None:
        cfg["task"]["model"] = args.model
    for s, v in parse_overrides(args.set).items():
        cfg[s].update(v)
    return cfg["run"], cfg["method"], cfg["task"]


def _progress(label: str, enabled: bool):
    """A run callback drawing a tqdm bar over rounds (latest metric and train loss)."""
    from fedbench.runners.callbacks import Callback

    class Progress(Callback):
        def __init__(self):
            self.bar = None

        def on_run_start(self, exp, rounds):
            if enabled:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=rounds, desc=label, unit="round", leave=True, dynamic_ncols=True)

        def on_round_end(self, exp, entry):
            if self.bar is not None:
                post = {}
                if entry.metric is not None:
                    post["metric"] = f"{entry.metric:.4f}"
                if entry.train_loss is not None:
                    post["loss"] = f"{entry.train_loss:.3f}"
                self.bar.set_postfix(post)
                self.bar.update(1)

        def close(self):
            if self.bar is not None:
                self.bar.close()

    return Progress()


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


def _quiet_library_bars() -> None:
    """--no-progress also silences the weight-loading / GGUF bars of the HF libraries."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["TQDM_DISABLE"] = "1"  # plain tqdm bars (GGUF conversion); read when tqdm is imported
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    try:
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()
    except ImportError:
        pass


def execute(method: str, task: str, run: dict, method_cfg: dict, task_cfg: dict, progress: bool,
            data_cache: dict | None = None) -> tuple[dict, Path]:
    """Run one experiment with a progress bar. ``data_cache`` (a sweep's) keeps the last
    loaded task data, keyed by task and task config, so the next run of the same task in
    this process does not load (read, tokenize) it again."""
    if not progress:
        _quiet_library_bars()  # before the libraries are imported: tqdm reads TQDM_DISABLE then
    from fedbench.runners.experiment import Experiment

    key = json.dumps([task, task_cfg], sort_keys=True, default=str)
    data = None if data_cache is None else data_cache.get(key)
    bar = _progress(f"{method}/{task}", progress)
    try:
        exp = Experiment(method, task, run, method_cfg, task_cfg, callbacks=[bar], data=data)
        out = exp.run()
    finally:
        bar.close()
    if data_cache is not None and exp.data is not None:
        data_cache.clear()  # one task's data at a time
        data_cache[key] = exp.data
    return out


def cmd_run(args) -> int:
    from fedbench.runners.config import validate_run
    from fedbench.records import prepare_out_dir

    run, method_cfg, task_cfg = gather_configs(args)
    run_cfg = validate_run(args.method, args.task, run, method_cfg, task_cfg)[2]
    prepare_out_dir(run_cfg.out)
    rec, path = execute(args.method, args.task, run, method_cfg, task_cfg, not args.no_progress)
    print(summary_line(rec, path))
    return {"ok": 0, "failed": 1, "cancelled": 130}[rec["status"]]


# ----------------------------------------------------------------------------- sweep
def cmd_sweep(args) -> int:
    """Load, expand and validate the whole preset (``runners/sweep.py``), then run what is not done."""
    from fedbench import records
    from fedbench.runners import sweep
    from fedbench.runners.experiment import Experiment

    runs = sweep.load_sweep(args.preset, out=args.out)
    for out in dict.fromkeys(r["out_dir"] for r in runs):
        records.prepare_out_dir(out, create=not args.dry_run)
    warn = lambda line: print(f"fedbench: warning: {line}", file=sys.stderr)  # noqa: E731
    parallel = args.workers is not None or args.address is not None
    if parallel and not args.dry_run:
        from fedbench.runners.ray_sweep import run_sweep

        return run_sweep(runs, sweep.run_labels(runs), args, warn)
    done = failed = 0
    data_cache: dict = {}
    for i, (r, name) in enumerate(zip(runs, sweep.run_labels(runs)), 1):
        label = f"[{i}/{len(runs)}] {name}"
        path = Experiment(r["method"], r["task"], r["run"], r["method_config"], r["task_config"]).record_path()
        if sweep.is_done(path, warn):
            print(f"{label}: done ({path})")
            done += 1
            continue
        if args.dry_run:
            print(f"{label}: to run")
            continue
        rec, path = execute(r["method"], r["task"], r["run"], r["method_config"], r["task_config"],
                            not args.no_progress, data_cache)
        print(f"{label}: {summary_line(rec, path)}")
        if rec["status"] == "cancelled":
            return 130
        failed += rec["status"] != "ok"
    print(f"sweep: {len(runs)} runs, {done} already done, {failed} failed")
    return 1 if failed else 0


# ------------------------------------------------------------------------ leaderboard
def _print_paths(paths, records) -> int:
    for p in paths:
        print(p)
    if not paths:
        print(f"no records under {records}")
    return 0


def _need_matplotlib() -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError("plots need matplotlib: pip install 'fedbench-peft[plot]'")


def cmd_leaderboard(args) -> int:
    from fedbench.leaderboard.generate import generate

    if args.plots:
        _need_matplotlib()
    return _print_paths(generate(args.records, args.out, plots=args.plots), args.records)


def cmd_plot(args) -> int:
    _need_matplotlib()
    from fedbench.leaderboard.generate import generate

    return _print_paths(generate(args.records, args.out, plots=True), args.records)  # the tables link the PNGs


def cmd_export(args) -> int:
    from fedbench.leaderboard.export import export

    return _print_paths(export(args.records, args.out, args.per), args.records)


def cmd_compare(args) -> int:
    from fedbench.leaderboard.compare import compare, render_comparisons
    from fedbench.records import load_records

    records = [r for r in load_records(args.records) if r["run"]["task"] == args.task]
    if not records:
        raise UserError(f"no records of task {args.task!r} under {args.records}")
    methods = {r["run"]["method"] for r in records}
    missing = [m for m in [*args.methods, *args.against] if m not in methods]
    if missing:
        raise UserError(f"no records of method(s) {', '.join(missing)} for task {args.task!r} under {args.records}")
    found = compare(args.task, records, args.methods, args.against)
    print(render_comparisons(args.task, found, args.methods, args.against), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        return {"list": cmd_list, "run": cmd_run, "sweep": cmd_sweep, "leaderboard": cmd_leaderboard,
                "plot": cmd_plot, "export": cmd_export, "compare": cmd_compare}[args.cmd](args)
    except UserError as e:
        print(f"fedbench: error: {str(e).splitlines()[0] if str(e) else 'bad input'}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
