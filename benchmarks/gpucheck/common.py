"""What every section of the GPU check is handed: the device, the inputs, its time, a saver.

A section fills its own dict of the report as it goes and calls ``ctx.save()`` after each
figure, so a check killed mid-section still leaves every figure measured so far. Before a
unit of work it asks ``ctx.fits(estimate_s)``: False (the unit would end after the
section's deadline) marks the section ``stopped`` and the section returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Context:
    device: str  # "cuda" or "cpu": where the figures are measured
    quick: bool  # --quick: tiny sizes, a smoke run
    inputs: Any  # gpucheck.inputs.Inputs
    work: Any  # pathlib.Path: scratch folder (model folders, run outputs)
    deadline: float  # time.perf_counter() by which the section must end
    save: Callable[[], None]  # writes the report (JSON + summary) as it is now
    log: Callable[[str], None]  # one progress line
    section: dict = field(default_factory=dict)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def fits(self, estimate_s: float, what: str) -> bool:
        """Whether ``what`` (about ``estimate_s`` seconds) ends before the deadline; if not,
        the section is marked stopped, with why."""
        if estimate_s <= self.left():
            return True
        self.section["stopped"] = (f"time budget: {what} (about {estimate_s:.0f} s) does not fit in the "
                                   f"{max(self.left(), 0):.0f} s left to this section")
        self.log(self.section["stopped"])
        return False


def run_record(method: str, task: str, run: dict, method_config: dict, task_config: dict, data=None,
               callbacks=None):
    """Run one spec to its record; (record, Experiment). A run that is not ``ok`` raises
    (``RuntimeError``; ``KeyboardInterrupt`` when a signal cancelled it)."""
    from fedbench.runners.core.experiment import Experiment

    exp = Experiment(method, task, run, method_config=method_config, task_config=task_config, data=data,
                     callbacks=callbacks)
    rec, _ = exp.run()
    if rec["status"] == "cancelled":  # SIGTERM or Ctrl-C reached the run: the whole check stops (report kept)
        raise KeyboardInterrupt(rec["error"])
    if rec["status"] != "ok":
        raise RuntimeError(f"{method} on {task} ({run.get('executor', 'local')}, {run.get('device')}): "
                           f"{rec['status']}: {rec['error']}")
    return rec, exp


def failure(e: BaseException) -> dict:
    """A row's error, recorded in place of its figures (the section goes on with the next row)."""
    return {"error": f"{type(e).__name__}: {e}"}


class Estimate:
    """Seconds the next unit of work should take: the largest seconds per unit of ``scale``
    measured so far (before the first measurement, ``guess`` per unit)."""

    def __init__(self, guess: float):
        self.per_unit, self.measured = guess, False

    def __call__(self, scale: float = 1.0) -> float:
        return self.per_unit * scale

    def observe(self, seconds: float, scale: float = 1.0) -> None:
        value = seconds / scale
        self.per_unit = max(self.per_unit, value) if self.measured else value
        self.measured = True


__all__ = ["Context", "Estimate", "failure", "run_record"]
