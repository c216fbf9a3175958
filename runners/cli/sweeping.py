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
from pathlib import Path
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


#: a dry run lists this many runs to do (and as many done) one per line; the rest are counted
LIST_LIMIT = 500


def estimate_todo(todo: list[tuple[str, SweepRun]], timing_records: tuple[str, ...], say: Callable[[str], None],
                  limit: int | None = LIST_LIMIT) -> None:
    """A line per run still to do (the first ``limit``; None = all) with its estimated cost,
    and the total over all of them: measured s/round of the records under the runs' output
    folders and ``timing_records`` (the committed records) x rounds, timed as the claims
    report times a claim's missing runs (:func:`~fedbench.leaderboard.sweep_cost.run_estimate`,
    once per configuration: the seed changes no estimate)."""
    from fedbench.leaderboard.sweep_cost import run_estimate
    from fedbench.records import load_records

    roots: dict[Path, str] = {}  # each folder once, named as given
    for p in dict.fromkeys([*(r.spec.run.out for _, r in todo), *timing_records]):
        roots.setdefault(Path(p).resolve(), str(p))
    by_task: dict[str, list[dict]] = {}
    for root in roots:
        for rec in load_records(root) if root.is_dir() else ():
            by_task.setdefault(rec["run"]["task"], []).append(rec)
    total, missing, unlike, cache = 0.0, 0, 0, {}
    for i, (label, r) in enumerate(todo):
        key = (r.config or r.spec.run_id, r.spec.run.rounds)
        if key not in cache:
            cache[key] = run_estimate(r.spec, by_task.get(r.spec.task, []))
        seconds, how, other_config = cache[key]
        unlike += other_config
        if seconds is None:
            missing += 1
        else:
            total += seconds
        if limit is None or i < limit:
            say(f"{label}: to run, cost not estimated ({how})" if seconds is None
                else f"{label}: to run, est. {cpu_time(seconds)} ({how})")
    if limit is not None and len(todo) > limit:
        say(f"... {len(todo) - limit} more runs to do not listed (the first {limit} are; --only selects part)")
    unknown = f", {missing} not estimated" if missing else ""
    unknown += f", {unlike} timed from records of another task config" if unlike else ""
    cost = "none estimated" if todo and missing == len(todo) else f"est. {cpu_time(total)} in all{unknown}"
    say(f"sweep: {len(todo)} runs to do, {cost} "
        f"(measured s/round of the records under {', '.join(roots.values())})")


def cpu_time(seconds: float) -> str:
    return f"{seconds:.0f} CPU-s" if seconds < 60 else f"{seconds / 60:.1f} CPU-min"


def run_sweep(runs: list[SweepRun], *, progress: bool = False, parallel: Parallel | None = None,
              dry_run: bool = False, warn: Callable[[str], None], say: Callable[[str], None] = print,
              timing_records: tuple[str, ...] = ()) -> SweepResult:
    """Run ``runs`` that are not done; ``say`` gets each progress line, ``warn`` each warning.
    ``dry_run``: only say what is done and what each run to do would cost (timed from the
    records of the runs' folders and ``timing_records``)."""
    todo, done = sweep.pending(runs, warn, say, limit=LIST_LIMIT if dry_run else None)
    if dry_run:
        estimate_todo(todo, timing_records, say)
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


__all__ = ["CANCELLED", "FAILED", "LIST_LIMIT", "OK", "Parallel", "SweepResult", "cpu_time", "estimate_todo", "run_sweep"]
