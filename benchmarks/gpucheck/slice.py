"""Section 4: a budgeted slice of real work, against the committed CPU records.

The first ``fed_hello`` run of ``benchmarks/licenses_evidence_cpu.yaml`` (iid, seed 0, RoC
6:3:1, 20 clients, 5 per round, batch 16, AdamW, MiniLM at seq_len 32, scored every 5
rounds), run on the device for as many of its 50 rounds as fit in the time left: a
callback ends it ``ok`` after the round past which the next would not fit (at least one
round runs). Its seconds per round (round wall time without evaluation, the record's
``cost.seconds_per_round``) and per client step sit beside those of the committed record
of the same run (``leaderboard/records``, computed on the 2-core CPU with one thread), and
the speed-up is their ratio. Where licenses or the pretrained MiniLM are missing the run
uses the stand-ins of :mod:`gpucheck.inputs` (same shapes and row counts: the same work
per round, not the same scores). Beside the times, each finished round's training loss
against the committed record's (on the CPU the same spec gives the same losses; on CUDA
they differ by float rounding and by the dropout masks the device draws). ``--quick``: at
most ``QUICK_STEPS`` local steps per client, one round (a smoke run: times not comparable).
"""

from __future__ import annotations

import time

from gpucheck.common import Context, run_record
from gpucheck.inputs import ROOT

PRESET = ROOT / "benchmarks" / "licenses_evidence_cpu.yaml"
COMMITTED = ROOT / "leaderboard" / "records"
METHOD = "fed_hello"
QUICK_STEPS = 2


def preset_run() -> dict:
    """The preset's first ``fed_hello`` run, as expanded by the sweep loader."""
    from fedbench.runners.core.sweep import expand_sweep, load_preset

    return next(r for r in expand_sweep(load_preset(PRESET)) if r["method"] == METHOD)


def committed_record(row: dict) -> tuple[dict | None, str]:
    """The committed record of ``row`` (same run id) and its path, or None. The id is built
    without the preset's ``data_dir`` (a runtime field no run id hashes), which need not exist
    here: a lent GPU without ``../shared`` runs on stand-ins and still finds the record."""
    from fedbench.records import RecordError, read_record_file
    from fedbench.runners.core.spec import build_spec

    spec = build_spec(row["method"], row["task"], {**row["run"], "out": str(COMMITTED)}, row["method_config"],
                      {**row["task_config"], "data_dir": None})
    path = spec.record_path()
    try:
        return read_record_file(path), str(path.relative_to(ROOT))
    except RecordError as e:
        return None, f"{path.relative_to(ROOT)}: {e}"


def make_stop(deadline: float):
    """A callback that ends the run (``ok``) when one more round would end after ``deadline``."""
    from fedbench.runners.outputs.callbacks import Callback, Stop

    class BudgetStop(Callback):
        longest = 0.0

        def on_run_start(self, spec, state):
            self.last = time.perf_counter()  # set-up (data, model) done

        def on_round_end(self, log, state):
            now = time.perf_counter()
            self.longest, self.last = max(self.longest, now - self.last), now
            if now + self.longest > deadline:
                return Stop("ok", f"time budget: stopped after round {log.round}")
            return None

    return BudgetStop()


def cost_figures(rec: dict) -> dict:
    c = rec["cost"]
    return {"seconds_per_round": c["seconds_per_round"], "seconds_per_client_step": c["seconds_per_client_step"],
            "eval_seconds_per_round": c["eval_seconds_per_round"], "rounds": rec["run"]["rounds_completed"],
            "metric": rec["results"]["final"], "device": rec["run"]["device"], "env": rec["env"]}


def loss_rel(rec: dict, ref: dict) -> float | None:
    """Largest relative difference of a round's training loss, over the rounds ``rec`` finished."""
    a, b = rec["results"]["curve"], ref["results"]["curve"]
    got = [abs(x["train_loss"] - y["train_loss"]) / abs(y["train_loss"]) for x, y in zip(a, b)
           if x["train_loss"] is not None and y["train_loss"]]
    return max(got) if got else None


def run_slice(ctx: Context, sec: dict) -> None:
    row = preset_run()
    committed, where = committed_record(row)
    case = ctx.inputs.minilm(dropout=True, seq_len=row["task_config"]["seq_len"])
    sec.update(measured_by="records (cost.seconds_per_round: mean round wall time without evaluation; "
                           "cost.seconds_per_client_step) of the preset's run here and of its committed CPU record",
               device=ctx.device, preset=str(PRESET.relative_to(ROOT)), run=row["run"], model=case.about,
               committed_record=where)
    if not ctx.fits(20.0 if ctx.device == "cpu" else 10.0, "one round of the preset's fed_hello run"):
        return
    run = {**row["run"], "device": ctx.device, "out": str(ctx.work / "slice")}
    if ctx.quick:
        run.update(max_steps=QUICK_STEPS, rounds=1)
        sec["note"] = f"--quick: one round of at most {QUICK_STEPS} local steps per client; times not comparable"
    task_config = {**row["task_config"], "model": case.model, "data_dir": case.data_dir}
    ctx.log(f"slice: {METHOD} from {sec['preset']}, up to {run['rounds']} rounds, {ctx.left():.0f} s left")
    rec, _ = run_record(METHOD, row["task"], run, row["method_config"], task_config,
                        callbacks=[make_stop(ctx.deadline)])
    sec["here"] = cost_figures(rec)
    sec["stopped_by"] = rec["error"]
    if committed is not None:
        sec["committed"] = cost_figures(committed)
        sec["speedup_seconds_per_round"] = committed["cost"]["seconds_per_round"] / rec["cost"]["seconds_per_round"]
        sec["speedup_seconds_per_client_step"] = (committed["cost"]["seconds_per_client_step"]
                                                  / rec["cost"]["seconds_per_client_step"])
        same_inputs = ctx.inputs.minilm_pretrained is not None and ctx.inputs.licenses is not None
        if same_inputs and not ctx.quick:  # the committed run's model and data: its losses compare
            sec["train_loss_rel_vs_committed"] = loss_rel(rec, committed)
        ctx.log(f"slice: {sec['here']['rounds']} rounds, {sec['here']['seconds_per_round']:.2f} s/round here vs "
                f"{sec['committed']['seconds_per_round']:.2f} committed ({sec['committed']['device']}) -> "
                f"{sec['speedup_seconds_per_round']:.1f}x")
    ctx.save()


__all__ = ["committed_record", "preset_run", "run_slice"]
