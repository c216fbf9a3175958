"""Section 2: packed vs local client-steps per second on the device.

K = 5, 10, 20 clients per round (all sampled), fedavg with the licenses evidence preset's
LoRA (r 16, alpha 16, dropout 0.1, query+value) and batch (16 texts of 32 tokens), on
MiniLM and on a random-init BERT-base-shaped encoder, fp32 and bf16 (``run.precision``:
autocast). Measured by ``benchmarks/packed.py``'s :func:`packed_vs_local`: per executor one
run of a warm-up round and ``REPEATS`` timed rounds, each timed inside the executor from
the first job to the last result with the device synchronised at both ends; the figure is
the median over the timed rounds. Order: MiniLM fp32, BERT-base fp32, MiniLM bf16,
BERT-base bf16 (what the time budget cuts first comes last). ``--quick``: K = 2, one timed
round, one step, and MiniLM at fp32 only (its bf16 on a CPU says nothing about a GPU).
"""

from __future__ import annotations

import time

from gpucheck.common import Context, Estimate, failure

KS = (5, 10, 20)
QUICK_KS = (2,)
REPEATS, QUICK_REPEATS = 3, 1
STEPS, QUICK_STEPS = 4, 1
BATCH, SEQ_LEN = 16, 32
METHOD_CONFIG = {"lora_r": 16, "lora_alpha": 16, "lora_dropout": 0.1, "lora_targets": "qv"}


def run_speed(ctx: Context, sec: dict) -> None:
    from packed import packed_vs_local  # benchmarks/packed.py

    ks, repeats, steps = (QUICK_KS, QUICK_REPEATS, QUICK_STEPS) if ctx.quick else (KS, REPEATS, STEPS)
    sec.update(measured_by="benchmarks/packed.py packed_vs_local: client steps of a timed round / seconds inside "
                           "the executor (first job to last result, device synchronised), median over the timed "
                           "rounds after one warm-up round",
               device=ctx.device, method="fedavg", method_config=METHOD_CONFIG, batch_size=BATCH, seq_len=SEQ_LEN,
               local_steps=steps, repeats=repeats, rows=[])
    models = {"MiniLM": ctx.inputs.minilm(dropout=True, seq_len=SEQ_LEN), "BERT-base": ctx.inputs.bert_base(SEQ_LEN)}
    sec["models"] = {k: v.about for k, v in models.items()}
    estimate = {label: Estimate(guess=2.0) for label in models}  # seconds of a pair (local + packed) per client
    for precision in ("fp32", "bf16"):
        for label, case in models.items():
            if ctx.quick and label == "MiniLM" and precision != "fp32":
                continue
            for k in ks:
                if not ctx.fits(estimate[label](k), f"{label} {precision} K={k}"):  # grows with K
                    return
                t0 = time.perf_counter()
                row = {"model": label, "precision": precision, "device": ctx.device, "k": k}
                try:
                    got = packed_vs_local("ledgar", case.task_config(SEQ_LEN, eval_max_examples=32), "fedavg", (k,),
                                          steps, BATCH, METHOD_CONFIG, ctx.device, repeats=repeats,
                                          run_config={"precision": precision})[0]
                except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded; the next K still runs
                    row.update(failure(e), seconds=time.perf_counter() - t0)
                    sec["rows"].append(row)
                    ctx.log(f"speed {label} {precision} K={k}: ERROR {row['error']}")
                    continue
                row.update({key: got[key] for key in ("local_steps_per_s", "packed_steps_per_s", "ratio",
                                                       "local_steps_per_s_repeats", "packed_steps_per_s_repeats")},
                           seconds=time.perf_counter() - t0)
                estimate[label].observe(row["seconds"], k)
                sec["rows"].append(row)
                ctx.log(f"speed {label} {precision} K={k}: local {row['local_steps_per_s']:.1f}, packed "
                        f"{row['packed_steps_per_s']:.1f} client-steps/s -> {row['ratio']:.2f}x")
                ctx.save()


__all__ = ["KS", "run_speed"]
