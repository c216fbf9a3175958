"""Measured savings of layer allocation, printed as ratios from one run.

(a) FedRA: step FLOPs of a client whose model has 6 of the 12 blocks / all 12 blocks.
(b) Real freezing: a client training only the top half of the LoRA layers vs all layers:
    backward FLOPs ratio and accounted memory ratio (params + grads + optimizer state +
    saved activations).
(c) Simulator overhead: client training time / round time excluding evaluation, with
    10 clients per round (the rest is sampling, planning, payloads and aggregation).

Targets (issue 2): (a) <= 0.6, (b) backward <= 0.6 and memory <= 0.7, (c) >= 0.9.

    python benchmarks/savings.py                      # tiny_vision, CPU, ~1 minute
    python benchmarks/savings.py --task tiny_text --device cuda
"""

from __future__ import annotations

import argparse

import numpy as np

from fedbench.methods.base import ClientPlan
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.executors.worker import ClientJob


def client_step(runner: Experiment, layers, blocks=None):
    """Costs of one client's training on a fixed plan (the meters of a real run)."""
    state = runner.method.init_state(runner.am.read(runner.am.all_keys))
    plan = ClientPlan(0, 0, tuple(layers), blocks=None if blocks is None else tuple(blocks))
    payload = runner.method.client_payload(state, plan)
    job = ClientJob(1, plan, payload, None, runner.fed.train_indices[0], seed=0)
    return runner.worker.run(job).cost  # the ClientWorker of a real run, with its meters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="tiny_vision")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rounds", type=int, default=3, help="rounds for the overhead measurement (c)")
    args = ap.parse_args()

    runner = Experiment("fedra", args.task, dict(device=args.device, max_steps=2, out="/tmp/fedbench-bench"))
    runner.setup()
    L = runner.method.ctx.n_layers
    full = client_step(runner, range(L), blocks=range(L))
    half_blocks = sorted(np.random.default_rng(0).choice(L, L // 2, replace=False).tolist())
    half = client_step(runner, half_blocks, blocks=half_blocks)
    fl = lambda c: c.flops_forward_step + c.flops_backward_step
    print(f"task {args.task}, {L} blocks, device {runner.device}")
    print(f"(a) FedRA {L // 2}-of-{L} blocks {half_blocks}: step FLOPs ratio = "
          f"{fl(half):.4g} / {fl(full):.4g} = {fl(half) / fl(full):.3f}  (target <= 0.6)")

    runner_f = Experiment("fedavg", args.task, dict(device=args.device, max_steps=2, out="/tmp/fedbench-bench"))
    runner_f.setup()
    all_l = client_step(runner_f, range(L))
    top = client_step(runner_f, range(L // 2, L))
    print(f"(b) top half vs all LoRA layers: backward FLOPs ratio = {top.flops_backward_step:.4g} / "
          f"{all_l.flops_backward_step:.4g} = {top.flops_backward_step / all_l.flops_backward_step:.3f}  (target <= 0.6)")
    print(f"    accounted memory ratio = {top.accounted_bytes} / {all_l.accounted_bytes} B = "
          f"{top.accounted_bytes / all_l.accounted_bytes:.3f}  (target <= 0.7); breakdown top {top.breakdown}, "
          f"all {all_l.breakdown}")

    rec, _ = Experiment("fedavg", args.task, dict(device=args.device, clients=10, per_round=10, rounds=args.rounds,
                                                   out="/tmp/fedbench-bench")).run()
    c = rec["cost"]
    print(f"(c) client training time / round time (no eval), 10 clients/round, {args.rounds} rounds = "
          f"{c['client_seconds_total']:.3f} / {c['round_seconds_total']:.3f} s = "
          f"{c['client_seconds_total'] / c['round_seconds_total']:.3f}  (target >= 0.9)")


if __name__ == "__main__":
    main()
