"""Section 1: the CUDA paths give the records the CPU paths give.

For fedavg, fed_hello_rgd (Fed-HeLLo's RGD allocation), fedra and hetlora, on tiny_text and
on MiniLM (``ledgar`` task, seq_len 32: licenses, or synthetic texts of that shape), three
runs of one spec, fp32, SGD, LoRA dropout 0 and MiniLM's own dropout 0 (so no run draws
a random mask), three tiers (roc 1:1:1):

- *local* and *packed* on the device: the same record within ``TOLERANCE["packed"]``;
- *local* on the device against *local* on the CPU: within ``TOLERANCE["device"]``
  (on a CPU-only check the device run is the CPU run: that comparison is skipped).

Compared (:func:`differences`): each round's mean training loss (largest relative
difference), the final metric (absolute difference) and the metered TFLOPs per step
(relative difference: FLOP counts do not depend on float rounding, so local and packed
must agree exactly; across devices the attention kernel differs, so that one is shown,
not required).
"""

from __future__ import annotations

import time
from typing import Any

from gpucheck.common import Context, Estimate, failure, run_record

METHODS = ("fedavg", "fed_hello_rgd", "fedra", "hetlora")
QUICK_MINILM_METHODS = ("fedavg",)  # --quick: MiniLM runs one method (the four on tiny_text)
RUN = dict(rounds=2, clients=6, per_round=6, batch_size=8, local_epochs=1, max_steps=2, roc="1:1:1",
           optimizer="sgd", lr=0.05, eval_every=1, seed=0)
QUICK_RUN = dict(RUN, rounds=1, clients=3, per_round=3, max_steps=1)
METHOD_CONFIG = {"lora_dropout": 0.0}
TINY_TEXT = {"n_train": 160, "n_test": 48}

#: (largest relative difference of a round's training loss, absolute difference of the final
#: metric) allowed; why: see WHY
TOLERANCE = {
    "packed_cpu": (0.0, 0.0),
    "packed": (1e-5, 0.05),
    "device": (1e-4, 0.05),
}
WHY = {
    "packed_cpu": "on the CPU packed runs each client's rows through the same per-client operations as local: "
                  "bit for bit (tests/runners/test_packed.py)",
    "packed": "on CUDA the packed pass multiplies K clients' rows at once, and cuBLAS picks its kernel (and "
              "the order of its sums) by shape: last-bit differences per operation, grown over a few SGD steps "
              "to ~1e-6 of the loss; a row meeting another client's adapter would move the loss in the 2nd "
              "or 3rd digit. The metric may flip a near-tie prediction: one of 48-64 test examples moves "
              "accuracy by 0.02 and macro-F1 over 23 classes by up to ~0.04",
    "device": "CUDA and CPU kernels sum in different orders (TF32 off: PyTorch's default for float32 matrix "
              "products), and the fused attention kernels differ: ~1e-6 per operation, grown over two rounds; "
              "a wrong mask, dtype or a step that did not run would move the loss by more than 1e-2. "
              "Metric: as for packed",
}


def differences(a: dict, b: dict) -> dict:
    """Figures of record ``a`` against record ``b`` (the reference)."""
    la = [p["train_loss"] for p in a["results"]["curve"]]
    lb = [p["train_loss"] for p in b["results"]["curve"]]
    loss = max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(la, lb)), default=0.0)
    fa, fb = a["cost"]["tflops_per_step"]["mean"], b["cost"]["tflops_per_step"]["mean"]
    return {"loss_rel_max": loss, "rounds_compared": min(len(la), len(lb)),
            "metric": a["results"]["final"], "metric_ref": b["results"]["final"],
            "metric_abs": abs(a["results"]["final"] - b["results"]["final"]),
            "tflops_per_step": fa, "tflops_per_step_ref": fb,
            "tflops_rel": abs(fa - fb) / fb if fb else float(fa != fb)}


def verdict(diff: dict, kind: str, flops_exact: bool) -> dict:
    loss_tol, metric_tol = TOLERANCE[kind]
    ok = diff["loss_rel_max"] <= loss_tol and diff["metric_abs"] <= metric_tol
    if flops_exact:
        ok = ok and diff["tflops_rel"] == 0.0
    return {**diff, "tolerance": {"loss_rel": loss_tol, "metric_abs": metric_tol, "tflops_equal": flops_exact},
            "pass": ok}


def cases(ctx: Context) -> list[tuple[str, str, dict, str, tuple[str, ...], float]]:
    """(label, task, task config, what it is, methods, first estimate of a method's seconds) of each model."""
    minilm = ctx.inputs.minilm(dropout=False, seq_len=32)
    return [("tiny_text", "tiny_text", TINY_TEXT, "tiny_text (built-in made-up data, tiny 12-layer BERT)", METHODS, 5.0),
            ("MiniLM", "ledgar", minilm.task_config(32, classifier_dropout=0.0, eval_max_examples=64), minilm.about,
             QUICK_MINILM_METHODS if ctx.quick else METHODS, 15.0)]


def check_method(ctx: Context, method: str, task: str, task_config: dict, run: dict, data) -> tuple[dict, Any]:
    """The comparisons of one method's three runs (two on a CPU-only check); (row, data)."""
    common = dict(run, out=str(ctx.work / "correctness"), device=ctx.device)
    local, exp = run_record(method, task, {**common, "executor": "local"}, METHOD_CONFIG, task_config, data)
    packed, _ = run_record(method, task, {**common, "executor": "packed"}, METHOD_CONFIG, task_config, exp.data)
    row = {"packed_vs_local": verdict(differences(packed, local), "packed_cpu" if ctx.device == "cpu" else "packed",
                                      flops_exact=True),
           "executor_clients": packed["run"]["executor_clients"]}
    if ctx.device != "cpu":
        cpu, _ = run_record(method, task, {**common, "executor": "local", "device": "cpu"}, METHOD_CONFIG, task_config,
                            exp.data)
        row["device_vs_cpu"] = verdict(differences(local, cpu), "device", flops_exact=False)
    return row, exp.data


def _line(row: dict) -> str:
    if "error" in row:
        return f"correctness {row['model']} {row['method']}: ERROR {row['error']}"

    def one(v: dict) -> str:
        return f"{'pass' if v['pass'] else 'FAIL'} (loss rel {v['loss_rel_max']:.2g}, metric diff {v['metric_abs']:.3g})"
    dev = row.get("device_vs_cpu")
    return (f"correctness {row['model']} {row['method']}: packed vs local {one(row['packed_vs_local'])}"
            + ("" if dev is None else f"; {row['device']} vs cpu {one(dev)}"))


def run_correctness(ctx: Context, sec: dict) -> None:
    run = QUICK_RUN if ctx.quick else RUN
    sec.update(measured_by="records of runs of one spec (fedbench.runners.core.experiment.Experiment): "
                           "results.curve[].train_loss, results.final, cost.tflops_per_step.mean",
               device=ctx.device, run=run, method_config=METHOD_CONFIG,
               tolerance={k: {"loss_rel": v[0], "metric_abs": v[1], "why": WHY[k]} for k, v in TOLERANCE.items()},
               rows=[])
    if ctx.device == "cpu":
        sec["note"] = "device is the CPU: local vs packed is checked on the CPU; CUDA vs CPU is not run"
    for label, task, task_config, about, methods, guess in cases(ctx):
        data, estimate = None, Estimate(guess)
        for method in methods:
            if not ctx.fits(estimate(), f"{method} on {label}"):
                return
            t0 = time.perf_counter()
            try:
                got, data = check_method(ctx, method, task, task_config, run, data)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded; the next method still runs
                got = failure(e)
            row = {"model": label, "about": about, "method": method, "device": ctx.device, **got,
                   "seconds": time.perf_counter() - t0}
            estimate.observe(row["seconds"])
            sec["rows"].append(row)
            ctx.log(_line(row))
            ctx.save()
    sec["all_pass"] = all("error" not in r and r["packed_vs_local"]["pass"]
                          and r.get("device_vs_cpu", {"pass": True})["pass"] for r in sec["rows"])


__all__ = ["METHODS", "TOLERANCE", "check_method", "differences", "run_correctness", "verdict"]
