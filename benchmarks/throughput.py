"""Where a run's time goes, measured in one invocation.

(1) The FLOP meter's overhead on Fed-HeLLo RGD (a new trainable layer set every
    client-round; the meter composes each client's figures from per-part measurements):
    seconds per round (evaluation excluded) of the default run vs
    ``run.measure_flops=false``, runs interleaved, median of each; target <= 1.1x.
(2) Evaluation's share of a run: eval seconds / (round seconds + eval seconds), with the
    default evaluation schedule (``run.eval_every`` none: about 10 scored rounds).
(3) bf16 vs fp32 (``run.precision``): seconds per local client step and the final score.
(4) Packed vs local client-steps per second for K = 5, 10, 20 clients per round on MiniLM
    and the tiny ViT: only when an executor named ``packed`` is registered
    (:func:`packed_vs_local` takes the executor's name).

Each section runs on tiny_text (tiny_vision for the ViT) by default; ``--licenses DIR``
runs (2), (3) and (4)'s MiniLM part on licenses (LEDGAR schema) with MiniLM at seq_len 32.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/throughput.py
    python benchmarks/throughput.py --licenses /work/shared/data/licenses --rounds 2

Timings on a shared machine are noisy: compare the ratios, measured here side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's code, not an installed copy

from fedbench.runners.executors.executor import EXECUTORS  # noqa: E402
from fedbench.runners.core.experiment import Experiment  # noqa: E402


def run_once(method: str, task: str, run: dict, task_cfg: dict, out: str, data=None) -> tuple[dict, Experiment]:
    exp = Experiment(method, task, {**run, "out": out}, task_config=task_cfg, data=data)
    rec, _ = exp.run()
    if rec["status"] != "ok":
        raise SystemExit(f"{method} on {task}: run {rec['status']}: {rec['error']}")
    return rec, exp


def client_step_seconds(exp: Experiment) -> float:
    """Seconds per local step over every trained client-round of a finished run."""
    trained = [c for _, c in exp.state.costs if c.steps]
    return sum(c.seconds for c in trained) / sum(c.steps for c in trained)


def meter_overhead(task: str, run: dict, task_cfg: dict, repeats: int, out: str) -> float:
    """(1): default / measure_flops=false seconds per round of fed_hello_rgd."""
    _, exp = run_once("fed_hello_rgd", task, {**run, "rounds": 1}, task_cfg, out)  # warm-up: data and model once
    data, on, off, rec_on = exp.data, [], [], None
    for i in range(repeats):
        for measure in ((True, False) if i % 2 == 0 else (False, True)):
            rec, _ = run_once("fed_hello_rgd", task, {**run, "measure_flops": measure, "seed": i}, task_cfg, out,
                              data)
            (on if measure else off).append(rec["cost"]["seconds_per_round"])
            rec_on = rec if measure else rec_on
    ratio = statistics.median(on) / statistics.median(off)
    c = rec_on["cost"]
    print(f"(1) meter overhead, fed_hello_rgd on {task}: default {statistics.median(on):.3f} s/round, "
          f"measure_flops=false {statistics.median(off):.3f} s/round -> {ratio:.3f}x (target <= 1.1); "
          f"{c['meter_measurements']} passes measured, {c['meter_reused']} client-rounds composed")
    return ratio


def eval_share(method: str, task: str, run: dict, task_cfg: dict, out: str) -> float:
    """(2): evaluation seconds / (round seconds + evaluation seconds) of one run."""
    rec, exp = run_once(method, task, run, task_cfg, out)
    c = rec["cost"]
    share = c["eval_seconds_total"] / (c["round_seconds_total"] + c["eval_seconds_total"])
    scored = [log.round for log in exp.state.logs if log.metric is not None]
    print(f"(2) evaluation share, {method} on {task}, {run['rounds']} rounds: {c['eval_seconds_total']:.2f} s "
          f"evaluating of {c['round_seconds_total'] + c['eval_seconds_total']:.2f} s -> {share:.1%} "
          f"(rounds scored: {scored}; eval_every {rec['run']['run_config']['eval_every']})")
    return share


def precision_speed(method: str, task: str, run: dict, task_cfg: dict, out: str) -> dict[str, float]:
    """(3): seconds per client step and the final score at fp32 and bf16."""
    got = {}
    for precision in ("fp32", "bf16"):
        rec, exp = run_once(method, task, {**run, "precision": precision, "measure_flops": False}, task_cfg, out)
        got[precision] = client_step_seconds(exp)
        print(f"(3) {precision}, {method} on {task}: {got[precision] * 1e3:.1f} ms/client step, final "
              f"{rec['results']['metric_name']} {rec['results']['final']:.4f}")
    print(f"(3) bf16 / fp32 s/step: {got['bf16'] / got['fp32']:.3f}")
    return got


def packed_vs_local(executor: str, cases: list[tuple[str, str, dict]], ks=(5, 10, 20), out: str = "/tmp",
                    rounds: int = 2) -> dict | None:
    """(4): client-steps per second of ``executor`` vs ``local`` for each (label, task,
    task config) of ``cases`` and K clients per round; None (a printed line) when no
    executor of that name is registered."""
    if executor not in EXECUTORS:
        print(f"(4) packed vs local: skipped, no executor named {executor!r} is registered "
              f"(registered: {', '.join(EXECUTORS.keys())})")
        return None
    got = {}
    for label, task, task_cfg in cases:
        for k in ks:
            rate = {}
            for ex in ("local", executor):
                run = {"rounds": rounds, "clients": k, "per_round": k, "max_steps": 2, "executor": ex,
                       "measure_flops": False}
                rec, exp = run_once("fedavg", task, run, task_cfg, out)
                steps = sum(c.steps for _, c in exp.state.costs)
                rate[ex] = steps / rec["cost"]["round_seconds_total"]
            got[(label, k)] = rate
            print(f"(4) {label}, K={k}: local {rate['local']:.1f} client-steps/s, {executor} "
                  f"{rate[executor]:.1f} client-steps/s -> {rate[executor] / rate['local']:.2f}x")
    return got


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each meter variant (interleaved)")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of the runs of (1), (2), (3)")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--per-round", type=int, default=5)
    ap.add_argument("--max-steps", type=int, default=None, help="cap on local steps (None = full epochs)")
    ap.add_argument("--licenses", default=None, help="licenses data: (2), (3), (4) on MiniLM (seq_len 32)")
    ap.add_argument("--tiny-text", default="{}", help="tiny_text's task config as JSON (smaller in tests)")
    ap.add_argument("--tiny-vision", default="{}", help="tiny_vision's task config as JSON (smaller in tests)")
    ap.add_argument("--executor", default="packed", help="the executor (4) compares with local")
    args = ap.parse_args(argv)
    tiny, tiny_vision = json.loads(args.tiny_text), json.loads(args.tiny_vision)
    run = {"rounds": args.rounds, "clients": args.clients, "per_round": args.per_round, "roc": "6:3:1",
           "max_steps": args.max_steps}
    with tempfile.TemporaryDirectory() as out:
        meter_overhead("tiny_text", run, tiny, args.repeats, out)
        if args.licenses:
            task, cfg = "ledgar", {"data_dir": args.licenses, "model": "minilm-l6", "seq_len": 32}
            real = {**run, "batch_size": 16, "optimizer": "adamw", "lr": 0.005}
        else:
            task, cfg, real = "tiny_text", tiny, run
        eval_share("fed_hello", task, real, cfg, out)
        precision_speed("fedavg", task, real, cfg, out)
        packed_vs_local(args.executor, [("MiniLM" if args.licenses else "tiny_text", task, cfg),
                                        ("tiny ViT", "tiny_vision", {**tiny_vision, "model": "vit"})], out=out)


if __name__ == "__main__":
    main()
