"""Section 3: cost per step at Fed-HeLLo's shape, measured, planned and printed.

Shape: BERT-base (random init: cost needs no weights), LoRA r 16 / alpha 16 / dropout 0.1
on query and value, AdamW, batch 128 (Fed-HeLLo Sec. IV-A: "The batch sizes for local
training on ... LEDGAR ... are 128"). The paper gives no sequence length: 128 here, the
``ledgar`` task's and ``fedbench plan``'s default (LexGLUE truncates LEDGAR at 512). The
tiers are Fed-HeLLo's three (layer budgets 1/2, 3/4 and all of the 12 layers; ranks 1, 4,
16 for the rank methods).

Per method and tier, three figures side by side:

- **run** (measured on the device): one round of a real run, three clients (one per tier,
  roc 1:1:1), one local step each; from its record: ``tflops_per_step.by_tier``
  (FlopCounterMode, forward and backward) and ``peak_mem_gb.by_tier`` (on CUDA
  ``torch.cuda.max_memory_allocated`` per client, source ``cuda``; on a CPU the accounted
  figure) beside ``accounted_mem_gb.by_tier`` (parameters + gradients + optimizer state +
  saved activations). The layers each client trains are the method's own round-1 choice.
- **plan**: ``fedbench plan``'s measurement of the same budget (:func:`meta_planner`, the
  model on ``meta``, the method's plan placed at its lowest layers: the memory bound).
- **paper**: Fed-HeLLo Table III (LEDGAR, BERT-base) "Avg Back. Comp. Cost (TFLOPs)" and
  "Avg Memory Cost (GB)", averages over clients under RoC 6:3:1 and 1:1:1, compared with
  the tier figures averaged with those weights (clients that take no part left out).
"""

from __future__ import annotations

import time

from gpucheck.common import Context, Estimate, failure, run_record

METHODS = ("fed_hello", "straggler", "fedra", "fedra_fulldepth", "hetlora", "exclusive")
BATCH, SEQ_LEN = 128, 128
QUICK_BATCH, QUICK_SEQ_LEN = 4, 16
LORA = {"lora_r": 16, "lora_alpha": 16, "lora_dropout": 0.1, "lora_targets": "qv"}
RUN = dict(rounds=1, clients=3, per_round=3, roc="1:1:1", max_steps=1, local_epochs=1, optimizer="adamw", lr=1e-3,
           eval_every=1, seed=0)

PAPER_SOURCE = ("Fed-HeLLo (../shared/papers/fed_hello.txt) Table III, LEDGAR with BERT-base, batch 128: Avg Back. "
                "Comp. Cost (TFLOPs) and Avg Memory Cost (GB) per RoC. Its FedRA row is FedRA's random allocation "
                "at full depth (here fedra_fulldepth). Table II (CIFAR-100, ViT-base, batch 128) prints nearly the "
                "same (Fed-HeLLo 2.03, Exclusive 3.25 TFLOPs; 10.74 / 12.29 GB). The paper does not say how it counted "
                "(FLOPs or multiply-adds, measured or derived) nor how it measured memory")
#: method -> roc -> (backward TFLOPs per step, GB), as printed
PAPER = {
    "straggler": {"6:3:1": (1.62, 10.61)},
    "exclusive": {"6:3:1": (3.25, 12.38), "1:1:1": (3.25, 12.38)},
    "hetlora": {"6:3:1": (3.22, 12.35), "1:1:1": (3.23, 12.36)},
    "fedra_fulldepth": {"6:3:1": (2.04, 10.57), "1:1:1": (2.45, 11.16)},
    "fed_hello": {"6:3:1": (2.04, 10.74), "1:1:1": (2.45, 11.28)},
}
ROCS = ("6:3:1", "1:1:1")


def tier_figures(rec: dict) -> dict[str, dict]:
    """{tier: figures} of a run's record (tiers whose client trained)."""
    c = rec["cost"]
    out = {}
    for t, fl in c["tflops_per_step"]["by_tier"].items():
        tier = rec["run"]["tiers"][int(t)]
        out[t] = {"layers": tier["layers"], "rank": tier["rank"], "tflops_forward": fl["forward"],
                  "tflops_backward": fl["backward"], "peak_mem_gb": c["peak_mem_gb"]["by_tier"][t]["max"],
                  "accounted_gb": c["accounted_mem_gb"]["by_tier"][t]["max"]}
    return out


def weighted(tiers: dict[str, dict], key: str, weights: tuple[float, ...]) -> float | None:
    """The mean of ``key`` over the tiers present, weighted by ``weights`` renormalised to them."""
    got = [(weights[int(t)], f[key]) for t, f in tiers.items() if f.get(key) is not None]
    total = sum(w for w, _ in got)
    return sum(w * v for w, v in got) / total if total else None


def plan_tiers(shape, method: str, tiers: dict[str, dict], batch: int, seq_len: int) -> dict[str, dict]:
    """``fedbench plan``'s figures of each tier's budget (layers, rank) of the run."""
    from fedbench.methods import METHODS as REGISTRY
    from fedbench.runners.budget.plan import meta_planner, method_config, step_settings

    cls = REGISTRY.get(method)
    cfg = method_config(cls, LORA["lora_r"], LORA["lora_targets"], LORA["lora_dropout"], shape.task.kind)
    planner = meta_planner(shape, cls, cfg, shape.batch(batch, seq_len), step_settings(batch, "adamw"))
    out = {}
    for t, f in tiers.items():
        p = planner.probe(f["layers"], f["rank"])
        if p.figures is None:
            out[t] = {"skip": True}
            continue
        out[t] = {"trained_layers": len(p.plan.train_layers), "tflops_forward": p.figures.flops_forward / 1e12,
                  "tflops_backward": p.figures.flops_backward / 1e12, "accounted_gb": p.accounted_bytes / 1e9}
    return out


def compare_paper(method: str, run: dict, plan: dict) -> dict:
    from fedbench.runners.core.tiers import parse_roc

    out = {}
    for roc in ROCS:
        weights = tuple(parse_roc(roc))
        paper = PAPER.get(method, {}).get(roc)
        out[roc] = {"run_tflops_backward": weighted(run, "tflops_backward", weights),
                    "run_peak_mem_gb": weighted(run, "peak_mem_gb", weights),
                    "plan_tflops_backward": weighted(plan, "tflops_backward", weights),
                    "plan_accounted_gb": weighted(plan, "accounted_gb", weights),
                    "paper_tflops_backward": None if paper is None else paper[0],
                    "paper_gb": None if paper is None else paper[1]}
    return out


def run_cost(ctx: Context, sec: dict) -> None:
    batch, seq_len = (QUICK_BATCH, QUICK_SEQ_LEN) if ctx.quick else (BATCH, SEQ_LEN)
    case = ctx.inputs.bert_base(seq_len)
    cfg = ctx.inputs.bert_config()
    sec.update(measured_by={"run": "record of a 1-round run (cost.tflops_per_step.by_tier: FlopCounterMode; "
                                   "cost.peak_mem_gb.by_tier: torch.cuda.max_memory_allocated per client on CUDA, "
                                   "else accounted; cost.accounted_mem_gb.by_tier)",
                            "plan": "fedbench plan's probe (runners/budget/plan.py meta_planner + Planner.probe: one "
                                    "metered step on meta tensors, lowest placement)",
                            "paper": PAPER_SOURCE},
               device=ctx.device, model=case.about, batch_size=batch, seq_len=seq_len, lora=LORA, run=RUN,
               seq_len_note="the paper gives no sequence length: 128 is the ledgar task's and fedbench plan's "
                            "default (LexGLUE: 512)", rows=[])
    if ctx.quick:
        sec["note"] = "--quick: a 2-layer width-96 stand-in at batch 4 x 16 tokens, not the paper's shape"
    # first guess: ~15 s on a GPU (or a quick run); a full-size CPU step at batch 128 x 128 takes minutes
    estimate, data = Estimate(guess=15.0 if ctx.quick or ctx.device != "cpu" else 600.0), None
    for method in METHODS:
        if not ctx.fits(estimate(), method):
            return
        t0 = time.perf_counter()
        try:
            row = cost_row(ctx, method, case, cfg, batch, seq_len, data)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded; the next method still runs
            sec["rows"].append({"method": method, "device": ctx.device, **failure(e)})
            ctx.log(f"cost {method}: ERROR {sec['rows'][-1]['error']}")
            continue
        data = row.pop("data")
        row["seconds"] = time.perf_counter() - t0
        estimate.observe(row["seconds"])
        sec["rows"].append(row)
        avg = row["vs_paper"]["6:3:1"]
        ctx.log(f"cost {method}: 6:3:1 backward TFLOPs/step run {avg['run_tflops_backward']:.3g} plan "
                f"{avg['plan_tflops_backward']:.3g} paper {avg['paper_tflops_backward']}; GB run "
                f"{avg['run_peak_mem_gb']:.3g} ({row['peak_mem_source']}) plan {avg['plan_accounted_gb']:.3g} "
                f"paper {avg['paper_gb']}")
        ctx.save()


def cost_row(ctx: Context, method: str, case, cfg, batch: int, seq_len: int, data) -> dict:
    """One method's run on the device and its plan, per tier, and their averages beside the paper's."""
    from fedbench.runners.budget.plan_models import EncoderShape, Shape

    rec, exp = run_record(method, "ledgar", {**RUN, "batch_size": batch, "device": ctx.device,
                                             "out": str(ctx.work / "cost")},
                          LORA, case.task_config(seq_len, eval_max_examples=32), data)
    run = tier_figures(rec)
    plan = plan_tiers(Shape(EncoderShape(), cfg, case.about, exp.data.n_classes), method, run, batch, seq_len)
    return {"method": method, "device": ctx.device, "peak_mem_source": rec["cost"]["peak_mem_source"],
            "tiers": {t: {"run": run[t], "plan": plan[t]} for t in run}, "vs_paper": compare_paper(method, run, plan),
            "data": exp.data}


__all__ = ["METHODS", "PAPER", "compare_paper", "run_cost", "tier_figures", "weighted"]
