"""Fed-PLoRA's budget unit: how much of its gap to Fed-HeLLo is the tiers' budget?

Under RoC 6:3:1 with ``lora_r`` 16, Fed-PLoRA's paper budget (``budget: rank``) lets the
tiers train ranks 1 / 4 / 16 of the 16 rank-1 modules (1/16, 1/4 and all of the LoRA; the
ranks of Fed-HeLLo's HETLoRA baselines, methods/paper_defaults.py), while Fed-HeLLo's tiers
train 3 / 5 / 6 of 6 layers at rank 16 (1/2, 5/6, all). Three arms on one federation:

- ``fed_hello``: the layer budgets;
- ``fed_plora rank``: the paper's rank budgets;
- ``fed_plora layers``: Fed-PLoRA with Fed-HeLLo's layer budgets (``budget: layers``);
- ``fed_plora matched``: rank budgets with Fed-HeLLo's parameter fractions (``tier_ranks``
  8 / 13 / 16, i.e. 1/2, 13/16 ~ 5/6, all).

Printed: each arm's final score and train loss over the seeds (mean ± sd), and each arm's
LoRA parameter-updates per round relative to ``fed_plora rank``'s (from the tiers the run
recorded). The licenses runs of the same question: benchmarks/licenses_plora_budget_cpu.yaml.

    OMP_NUM_THREADS=1 python benchmarks/plora_budget.py          # tiny_text, ~15 runs of ~13 s
    python benchmarks/plora_budget.py --seeds 0 1 --rounds 10    # quicker
"""

from __future__ import annotations

import argparse
import json
import tempfile

import numpy as np

from fedbench.runners.core.experiment import Experiment

TASK = {"n_train": 800, "n_test": 200, "depth": 6, "width": 48, "label": "keyword", "n_classes": 6, "keywords": 2,
        "vocab_size": 256}
ARMS = {  # name: (method, run fields, method fields)
    "fed_hello": ("fed_hello", {}, {}),
    "fed_plora rank": ("fed_plora", {}, {"budget": "rank"}),
    "fed_plora layers": ("fed_plora", {}, {"budget": "layers"}),
    "fed_plora matched": ("fed_plora", {"tier_ranks": [8, 13, 16]}, {"budget": "rank"}),
}


def share_trained(rec: dict, budget: str, n_layers: int, rank: int) -> float:
    """The expected share of the LoRA a sampled client trains, over the run's tiers:
    layers / n_layers for a layer budget, rank / R for a rank budget."""
    tiers = rec["run"]["tiers"]
    if budget == "rank":
        return sum(t["fraction"] * t["rank"] / rank for t in tiers)
    return sum(t["fraction"] * t["layers"] / n_layers for t in tiers)


def run_arm(name: str, seed: int, rounds: int, out: str, task: dict) -> dict:
    method, run_extra, method_extra = ARMS[name]
    run = dict(rounds=rounds, clients=10, per_round=5, roc="6:3:1", seed=seed, out=out, eval_every=max(1, rounds // 6),
               measure_flops=False, optimizer="adamw", lr=5e-3, batch_size=16, local_epochs=1, threads=1, **run_extra)
    rec, _ = Experiment(method, "tiny_text", run, {"lora_r": 16, "lora_alpha": 16.0, **method_extra}, task).run()
    last = rec["results"]["curve"][-1]
    budget = "layers" if method == "fed_hello" else method_extra["budget"]
    return {"score": last["metric"], "loss": last["train_loss"],
            "share": share_trained(rec, budget, task["depth"], 16)}


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--task", default=json.dumps(TASK), help="tiny_text config as JSON")
    args = ap.parse_args(argv)
    task = json.loads(args.task)
    got: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as out:
        for name in args.arms:
            got[name] = [run_arm(name, s, args.rounds, out, task) for s in args.seeds]
    ref = np.mean([r["share"] for r in got.get("fed_plora rank", [])]) if "fed_plora rank" in got else None
    print(f"tiny_text, 10 clients, 5 per round, RoC 6:3:1, lora_r 16, {args.rounds} rounds, seeds {args.seeds}")
    for name, rows in got.items():
        s, l = np.array([r["score"] for r in rows]), np.array([r["loss"] for r in rows])
        share = np.mean([r["share"] for r in rows])
        rel = f", {share / ref:.1f}x fed_plora rank's" if ref else ""
        print(f"{name:18s} score {s.mean():.3f} ± {s.std(ddof=1) if len(s) > 1 else 0:.3f}   train loss "
              f"{l.mean():.2f}   LoRA share trained per sampled client {share:.2f}{rel}")
    return got


if __name__ == "__main__":
    main()
