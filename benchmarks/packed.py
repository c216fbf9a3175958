"""Throughput of the ``packed`` executor against ``local``: client-steps per second and s/step per tier.

For each K (clients per round, every client sampled) one run of two rounds with each
executor; the figure is round 2's time inside the executor (round 1 builds models and
measures the meter's steps), so a client-step is one local step of one client:

    client-steps/s = (sum of the round's client steps) / (seconds the executor took)

Per tier, s/step = the tier's client seconds / its client steps (packed: a group's measured
time shared out by the clients' FLOPs, ``runners.packed.time_shares``; a method whose tiers
train different layers shows whether packing keeps the layer-skip savings: the tiers'
ratios should follow local's).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/packed.py                 # tiny_text
    python benchmarks/packed.py --model minilm-l6 --data /work/shared/data/licenses  # MiniLM (ledgar task)
    python benchmarks/packed.py --task tiny_vision

Importable: :func:`packed_vs_local` (used by benchmarks/throughput.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's code, not an installed copy

from fedbench.runners.core.experiment import Experiment  # noqa: E402


class _Timed(Experiment):
    """Times the executor's ``execute`` (from the first job to the last result) per round."""

    def make_executor(self):
        executor = super().make_executor()
        self.execute_seconds, inner = [], executor.execute

        def execute(jobs):  # the round loop stops reading after the last result: time up to each one
            t0 = time.perf_counter()
            self.execute_seconds.append(0.0)
            for res in inner(jobs):
                self.execute_seconds[-1] = time.perf_counter() - t0
                yield res
        executor.execute = execute
        return executor


def _one(method: str, task: str, task_config: dict, run: dict, method_config: dict, executor: str, data: Any):
    exp = _Timed(method, task, {**run, "executor": executor}, method_config=method_config, task_config=task_config,
                 data=data)
    rec, _ = exp.run()
    if rec["status"] != "ok":
        raise SystemExit(f"{method} on {task} with {executor}: {rec['status']}: {rec['error']}")
    costs = [c for rnd, c in exp.state.costs if rnd == 2 and c.steps]
    steps = sum(c.steps for c in costs)
    tiers: dict[int, list[float]] = defaultdict(lambda: [0.0, 0])
    for c in costs:
        tiers[c.tier][0] += c.seconds
        tiers[c.tier][1] += c.steps
    return exp.data, steps / exp.execute_seconds[1], {t: s / n for t, (s, n) in sorted(tiers.items())}


def packed_vs_local(task: str = "tiny_text", task_config: dict | None = None, method: str = "fedavg",
                    ks: Sequence[int] = (5, 10, 20), steps: int = 4, batch_size: int | None = None,
                    method_config: dict | None = None, device: str | None = None, seed: int = 0,
                    roc: str | None = "1:1:1") -> list[dict]:
    """Client-steps/s of ``packed`` and ``local`` for each K in ``ks`` (K clients, all
    sampled, ``steps`` local steps each, two rounds, round 2 timed).

    Returns one dict per K: ``k``, ``local_steps_per_s``, ``packed_steps_per_s``,
    ``ratio`` (packed / local), ``local_s_per_step`` / ``packed_s_per_step`` ({tier: s/step}).
    ``task_config``, ``method_config``: overrides as for ``Experiment``; ``device``: "cpu",
    "cuda" (None: the run default); ``batch_size`` None: the task's default; ``roc``: the
    tiers' ratio (``run.roc``; None: one tier)."""
    rows, data = [], None
    with tempfile.TemporaryDirectory() as out:
        for k in ks:
            run = {"clients": k, "per_round": k, "rounds": 2, "max_steps": steps, "local_epochs": 1,
                   "eval_every": 1000, "seed": seed, "out": out}
            if batch_size is not None:
                run["batch_size"] = batch_size
            if roc is not None:
                run["roc"] = roc
            if device is not None:
                run["device"] = device
            row: dict[str, Any] = {"k": k}
            for executor in ("local", "packed"):
                data, rate, tiers = _one(method, task, dict(task_config or {}), run, dict(method_config or {}),
                                         executor, data)
                row[f"{executor}_steps_per_s"], row[f"{executor}_s_per_step"] = rate, tiers
            row["ratio"] = row["packed_steps_per_s"] / row["local_steps_per_s"]
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="tiny_text")
    ap.add_argument("--model", default=None, help="encoder of the ledgar task (e.g. minilm-l6): runs the ledgar task")
    ap.add_argument("--data", default="/work/shared/data/licenses", help="ledgar-format data folder (with --model)")
    ap.add_argument("--seq-len", type=int, default=64, help="tokens per text (with --model)")
    ap.add_argument("--method", default="fedavg")
    ap.add_argument("--tier-method", default="fed_hello_gd_triangle",
                    help="a method whose tiers train from different lowest layers, for the per-tier table")
    ap.add_argument("--ks", default="5,10,20")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    task, cfg = args.task, {}
    if args.model:
        task, cfg = "ledgar", {"model": args.model, "seq_len": args.seq_len, "data_dir": args.data}
    ks = [int(k) for k in args.ks.split(",")]
    for method in (args.method, args.tier_method):
        rows = packed_vs_local(task, cfg, method, ks, args.steps, args.batch_size, {"lora_dropout": 0.0}, args.device)
        print(f"{method} on {task} {cfg.get('model', '')}: client-steps/s, local vs packed")
        for r in rows:
            print(f"  K={r['k']:3d}: local {r['local_steps_per_s']:7.2f}  packed {r['packed_steps_per_s']:7.2f}  "
                  f"-> {r['ratio']:.2f}x")
            lo, pa = r["local_s_per_step"], r["packed_s_per_step"]
            base_l, base_p = max(lo.values()), max(pa.values())
            print("        s/step per tier (and / slowest tier): " + "; ".join(
                f"tier {t}: local {lo[t]:.4f} ({lo[t] / base_l:.2f}) packed {pa[t]:.4f} ({pa[t] / base_p:.2f})"
                for t in lo))


if __name__ == "__main__":
    main()
