"""The one sweep loop: ``fedbench sweep``, :func:`fedbench.sweep` and the Ray path all run a
preset's runs through :func:`run_sweep`.

The runs (loaded, expanded and validated by :func:`~fedbench.runners.core.sweep.load_sweep`)
are split into done and to do (:func:`~fedbench.runners.core.sweep.pending`: a line per done
run; a corrupt record is one warning and the run is done again); then the runs to do go one
after another in this process (the data loaded once per task config) or, with
:class:`Parallel` options, to Ray tasks (:mod:`~fedbench.runners.executors.ray_sweep`). Each
finished run prints its line; a cancelled run (SIGTERM, Ctrl-C) stops the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fedbench.runners.core import sweep
from fedbench.runners.core.sweep import SweepRun

#: exit status of a sweep: all ok, some failed, cancelled
OK, FAILED, CANCELLED = 0, 1, 130


@dataclass(frozen=True)
class Parallel:
    """Ray options of a parallel sweep (``--workers``, ``--address``, ``--cpus-per-run``,
    ``--gpus-per-run``, ``--node-retries``); None = the default of each."""

    workers: int | None = None
    address: str | None = None
    cpus_per_run: float | None = None
    gpus_per_run: float | None = None
    node_retries: int | None = None


@dataclass(frozen=True)
class SweepResult:
    status: int  # OK, FAILED or CANCELLED
    runs: int
    done: int  # finished before this sweep
    failed: int


def run_sweep(runs: list[SweepRun], *, progress: bool = False, parallel: Parallel | None = None,
              dry_run: bool = False, warn: Callable[[str], None], say: Callable[[str], None] = print) -> SweepResult:
    """Run ``runs`` that are not done; ``say`` gets each progress line, ``warn`` each warning."""
    todo, done = sweep.pending(runs, warn, say)
    if dry_run:
        for label, _ in todo:
            say(f"{label}: to run")
        return SweepResult(OK, len(runs), done, 0)
    if parallel is not None:
        from fedbench.runners.executors.ray_sweep import run_pending

        return run_pending(todo, len(runs), done, parallel, warn, say)
    from fedbench.runners.cli.launch import execute, summary_line

    failed, data_cache = 0, {}
    for label, r in todo:
        rec, path = execute(r.spec, progress, data_cache=data_cache)
        say(f"{label}: {summary_line(rec, path)}")
        if rec["status"] == "cancelled":
            return SweepResult(CANCELLED, len(runs), done, failed)
        failed += rec["status"] != "ok"
    say(f"sweep: {len(runs)} runs, {done} already done, {failed} failed")
    return SweepResult(FAILED if failed else OK, len(runs), done, failed)


__all__ = ["CANCELLED", "FAILED", "OK", "Parallel", "SweepResult", "run_sweep"]
