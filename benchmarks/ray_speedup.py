"""Speed-up of the Ray paths on this machine, in one invocation.

1. Parallel sweep: 8 tiny runs (tiny_text, the small smoke config) one after another in
   this process (today's ``fedbench sweep``), then as Ray tasks with ``--workers 1`` and
   ``--workers 2`` (1 torch thread per run) on one local Ray instance (started once and
   warmed up first, so the ratio is that of the runs, not of Ray's start-up, which is
   printed apart).
2. The ray executor: one run with 10 clients per round, ``--executor local`` vs ``--executor
   ray --workers 2``: wall time of the whole run (the actors' start-up included) and the
   rounds' time (``cost.round_seconds_total``), and whether the two records agree.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/ray_speedup.py [--rounds 3]

Other processes on the machine skew the figures: the load average is printed before and
after.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SMALL = {"n_train": 160, "n_test": 48}  # tests/smoke.py SMALL_TASK_CONFIGS["tiny_text"]


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def preset(dir_: Path, out: Path, seeds: list[int], rounds: int) -> str:
    p = dir_ / f"preset_{out.name}.yaml"
    task_cfg = ", ".join(f"{k}: {v}" for k, v in SMALL.items())
    p.write_text(f"task: tiny_text\nmethods: [fedavg, fedra]\nseeds: {seeds}\n"
                 f"run: {{rounds: {rounds}, clients: 4, per_round: 4}}\ntask_config: {{{task_cfg}}}\nout: {out}\n")
    return str(p)


def busy(out: Path, wall: float) -> str:
    """Run-seconds per wall second of a sweep (from its records): the runs in flight on
    average, and the mean seconds of one run (a saturated machine shows as longer runs)."""
    secs = [json.loads(p.read_text())["cost"]["seconds_total"] for p in out.rglob("*.json")]
    return f"{sum(secs) / wall:.2f} runs in flight on average, {sum(secs) / max(1, len(secs)):.1f} s per run"


def sweep(args: list[str]) -> float:
    from fedbench.runners.cli.cli import main

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as buf:
        rc = main(args)
    dt = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"sweep {args} failed ({rc}):\n{buf.getvalue()}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each sweep run (default 3)")
    ap.add_argument("--engine-rounds", type=int, default=3, help="rounds of the engine run (default 3)")
    ap.add_argument("--engine-train", type=int, default=6000,
                    help="tiny_text training examples of the engine run, split over its 10 clients (more = longer "
                         "client rounds; default 6000: about 0.9 s per client-round on one core, so that clients, "
                         "not the driver, dominate a round)")
    a = ap.parse_args()
    import ray

    from fedbench.runners.core.experiment import Experiment

    print(f"before: {load()} on {os.cpu_count()} cores; ray {ray.__version__}")
    tmp = Path(tempfile.mkdtemp(prefix="ray_speedup_"))
    seeds = [0, 1, 2, 3]  # x 2 methods = 8 runs

    t_seq = sweep(["sweep", preset(tmp, tmp / "seq", seeds, a.rounds), "--no-progress"])
    print(f"sweep, 8 runs in this process (no Ray):  {t_seq:7.1f} s  ({busy(tmp / 'seq', t_seq)})")
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    sweep(["sweep", preset(tmp, tmp / "warm", [100], 1), "--no-progress", "--workers", "2"])  # 2 warm workers
    print(f"ray start + warm-up of 2 workers:        {time.perf_counter() - t0:7.1f} s")
    t1 = sweep(["sweep", preset(tmp, tmp / "w1", seeds, a.rounds), "--no-progress", "--workers", "1"])
    print(f"sweep, 8 runs, --workers 1:               {t1:7.1f} s  ({busy(tmp / 'w1', t1)})")
    t2 = sweep(["sweep", preset(tmp, tmp / "w2", seeds, a.rounds), "--no-progress", "--workers", "2"])
    print(f"sweep, 8 runs, --workers 2:               {t2:7.1f} s  ({busy(tmp / 'w2', t2)})")
    print(f"speed-up --workers 2 vs --workers 1:      {t1 / t2:7.2f}x  (vs in-process: {t_seq / t2:.2f}x)")

    from fedbench.runners.outputs.summary import PROCESS_MEASURES

    recs = {}
    for runner in ("local", "ray"):
        t0 = time.perf_counter()
        rec, _ = Experiment("fedavg", "tiny_text", {"rounds": a.engine_rounds, "clients": 10, "per_round": 10,
                                                    "executor": runner, "workers": 2, "out": str(tmp / runner)},
                            task_config={**SMALL, "n_train": a.engine_train}).run()
        wall = time.perf_counter() - t0
        assert rec["status"] == "ok", rec["error"]
        recs[runner] = (rec, wall)
        print(f"engine {runner:5s} (10 clients/round, {a.engine_rounds} rounds): {wall:6.1f} s wall, rounds "
              f"{rec['cost']['round_seconds_total']:6.2f} s")
    (lr, lw), (rr, rw) = recs["local"], recs["ray"]
    same = lr["results"] == rr["results"] and \
        {k: v for k, v in lr["cost"].items() if k not in PROCESS_MEASURES} == \
        {k: v for k, v in rr["cost"].items() if k not in PROCESS_MEASURES}
    print(f"speed-up ray --workers 2 vs local: {lw / rw:.2f}x wall, "
          f"{lr['cost']['round_seconds_total'] / rr['cost']['round_seconds_total']:.2f}x rounds; "
          f"same record (but time): {same}")
    ray.shutdown()
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
