"""What a run costs beyond its training, measured in one invocation.

(a) Meter overhead: seconds per round (evaluation excluded) of the default run vs
    ``run.measure_flops=false``, runs interleaved (A B B A ...), median of each; target
    <= 1.15x. tiny_text with 100 clients x 1 step (10 per round), FedAvg and Fed-HeLLo
    RGD (a new trainable layer set every client-round: the meter composes its figures
    from per-part measurements, target <= 1.1x); licenses/MiniLM (20 clients, 5 per
    round, seq_len 32) when ``--licenses`` holds the data. With the meter's call counts
    (passes measured, client-rounds composed from known parts).
(b) Start-up: wall time of ``fedbench list`` in a fresh process (median of 3).
(c) Evaluation: share of round time spent evaluating (eval / (train rounds + eval)),
    at ``task.eval_batch_size=64`` (the old default) vs the default.
(d) Memory: the measured peak RSS per client (``cost.rss_peak_gb``) beside the
    accounted figure (``cost.accounted_mem_gb``), MiniLM run.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/overhead.py
    python benchmarks/overhead.py --repeats 3 --licenses /work/shared/data/licenses

Timings on a shared machine are noisy: compare the ratios, measured here side by side.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's code, not an installed copy

from fedbench.runners.core.experiment import Experiment  # noqa: E402

TINY = ("tiny_text", {"clients": 100, "per_round": 10, "max_steps": 1, "rounds": 10}, {})  # the one measured step amortises as in a real run
MINILM = ("ledgar", {"clients": 20, "per_round": 5, "max_steps": 2, "rounds": 2}, {"model": "minilm-l6", "seq_len": 32})


def one_run(task, run, task_cfg, out, data=None, run_extra=None, method="fedavg", **extra):
    exp = Experiment(method, task, {**run, "out": out, **(run_extra or {})}, task_config={**task_cfg, **extra},
                     data=data)
    rec, _ = exp.run()
    if rec["status"] != "ok":
        raise SystemExit(f"{task}: run {rec['status']}: {rec['error']}")
    return rec, exp.data


def meter_overhead(label, task, run, task_cfg, repeats, out, method="fedavg", target=1.15):
    data, on, off, rec_on, rec_off = None, [], [], None, None
    _, data = one_run(task, {**run, "rounds": 1}, task_cfg, out, method=method)  # warm-up: data, model built once
    for i in range(repeats):
        for measure in ((True, False) if i % 2 == 0 else (False, True)):
            rec, data = one_run(task, run, task_cfg, out, data, run_extra={"measure_flops": measure, "seed": i},
                                method=method)
            (on if measure else off).append(rec["cost"]["seconds_per_round"])
            rec_on, rec_off = (rec, rec_off) if measure else (rec_on, rec)
    ratio = statistics.median(on) / statistics.median(off)
    c = rec_on["cost"]
    print(f"(a) {label}, {method}: default {statistics.median(on):.3f} s/round, measure_flops=false "
          f"{statistics.median(off):.3f} s/round -> {ratio:.3f}x (target <= {target}); meter: "
          f"{c['meter_measurements']} passes measured, {c['meter_reused']} client-rounds composed "
          f"({run['rounds'] * run['per_round']} client-rounds)")
    return rec_on, data


def eval_share(label, task, run, task_cfg, data, out):
    for ebs in (64, None):
        extra = {} if ebs is None else {"eval_batch_size": ebs}
        rec, _ = one_run(task, run, task_cfg, out, data, **extra)
        c = rec["cost"]
        share = c["eval_seconds_total"] / (c["round_seconds_total"] + c["eval_seconds_total"])
        print(f"(c) {label}: eval_batch_size={rec['run']['task_config']['eval_batch_size']}: "
              f"{c['eval_seconds_per_round']:.3f} s eval/round, {c['seconds_per_round']:.3f} s train/round, "
              f"eval share {share:.1%}")


def list_time(n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fedbench", "list"], check=True, capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - t0)
    print(f"(b) `fedbench list`: {statistics.median(times):.2f} s wall (median of {n}; all: "
          f"{', '.join(f'{t:.2f}' for t in times)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each variant (interleaved)")
    ap.add_argument("--licenses", default="/work/shared/data/licenses", help="licenses data (skipped if absent)")
    args = ap.parse_args()
    import fedbench

    print(f"code: {Path(fedbench.__file__).resolve().parent.parent}")
    with tempfile.TemporaryDirectory() as out:
        list_time()
        _, data = meter_overhead("tiny_text, 100 clients x 1 step", *TINY, args.repeats, out)
        task, run, cfg = TINY
        meter_overhead("tiny_text, 100 clients x 1 step, roc 6:3:1", task, {**run, "roc": "6:3:1"}, cfg,
                       args.repeats, out, method="fed_hello_rgd", target=1.1)
        eval_share("tiny_text", *TINY, data, out)
        if Path(args.licenses, "train.jsonl").is_file():
            task, run, cfg = MINILM
            cfg = {**cfg, "data_dir": args.licenses}
            rec, data = meter_overhead("licenses/MiniLM (seq_len 32), 20 clients, 5 per round, 2 steps", task, run,
                                       cfg, args.repeats, out)
            eval_share("licenses/MiniLM", task, run, cfg, data, out)
            c = rec["cost"]
            rss = c.get("rss_peak_gb") or {}
            print(f"(d) licenses/MiniLM: accounted {c['accounted_mem_gb']['mean']:.3f} GB/client (max "
                  f"{c['accounted_mem_gb']['max']:.3f}); measured peak RSS "
                  + (f"{rss['mean']:.3f} GB/client (max {rss['max']:.3f})" if rss else "unavailable"))
        else:
            print(f"licenses data not found under {args.licenses}: MiniLM rows skipped")


if __name__ == "__main__":
    main()
