"""Parallel sweeps: ``fedbench sweep PRESET --workers N [--address ADDR]``.

The sweep's runs (already expanded and validated by :func:`~fedbench.runners.core.sweep.load_sweep`)
become Ray tasks named after the run (:func:`~fedbench.runners.executors.ray_run.run_task`), at
most ``--workers`` in flight, on a local Ray instance started for the sweep (``--workers`` x
``--cpus-per-run`` cores, the machine's GPUs) or on the cluster at ``--address`` (checked
first: one line and exit 2 within :data:`~fedbench.runners.executors.ray_executor.CONNECT_TIMEOUT_S`
where it is refused or does not answer). Each task asks for its resources (``--cpus-per-run``,
default 1; ``--gpus-per-run``, default one GPU where there are GPUs, fractions allowed) and
sets its torch threads to its cores.

Whatever node a run executes on, its files come back to this process's node
(:mod:`~fedbench.runners.executors.ray_files`): its checkpoints as it writes them, its record
at the end, which this process writes with the one record writer
(:func:`~fedbench.runners.core.experiment.write_run_record`) and reads back before it prints
the run's line; a record it cannot read back is reported ``FAILED``, never ``ok``. Each line
names the host and the Ray node that ran the run (the record's ``env.host`` / ``env.ray_node``).

* Finished runs are skipped before anything is sent.
* A run that fails is recorded ``failed`` (by the run itself, or here, from the checkpoint
  this node holds, when the task raised) and the sweep goes on.
* A run whose node or worker process died (``NodeDiedError``, ``WorkerCrashedError``, a lost
  result) is started again, on whatever node Ray picks, from the last checkpoint this node
  holds, up to ``--node-retries`` times (default :data:`NODE_RETRIES`); its record lists the
  attempts lost (``env.retries``: host, node, error, checkpoint round) and
  ``run.resume.from_round`` says where it went on.
* SIGTERM or Ctrl-C cancels the runs in flight: each gets ``ray.cancel`` (it writes its
  ``cancelled`` record and returns it: :mod:`~fedbench.runners.executors.ray_run`), this
  process waits up to :data:`GRACE_S` seconds for them, then force-cancels the rest and
  writes their ``cancelled`` records itself; then Ray is shut down (a local instance) or
  left (a cluster), with no task of the sweep behind. Exit status 130.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from fedbench.runners.core.signals import cancel_on_signals
from fedbench.runners.core.spec import RunSpec
from fedbench.runners.core.sweep import SweepRun
from fedbench.runners.executors.ray_executor import init_ray, require_ray, runtime_env

if TYPE_CHECKING:
    from fedbench.runners.cli.sweeping import Parallel, SweepResult

#: times a run whose node or worker process died is started again (``--node-retries``)
NODE_RETRIES = 2
#: seconds the runs in flight get to write their ``cancelled`` records after SIGTERM / Ctrl-C
GRACE_S = 10.0


def first_line(e: BaseException) -> str:
    """``Type: message``, the message's first sentence of its first line (Ray's run on)."""
    line = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {line.split('. ')[0][:200]}"


def held_state(spec: RunSpec):
    """The :class:`~fedbench.runners.core.state.RunState` of the checkpoint this process
    holds for ``spec``; None where there is none or it cannot be read (a re-run discards it)."""
    import torch

    from fedbench.runners.outputs import checkpoint

    ckpt = checkpoint.checkpoint_path(spec.record_path())
    try:
        saved = checkpoint.read(ckpt, spec.run_id, torch.device("cpu")) if ckpt.is_file() else None
    except Exception:  # noqa: BLE001 - whatever an unreadable checkpoint raises
        saved = None
    return saved[0] if saved else None


def record_from_checkpoint(spec: RunSpec, status: str, error: str) -> dict:
    """The record of a run that sent none back (its task raised, was lost more times than
    retried, or was force-cancelled): what the checkpoint held here says (rounds, curve,
    costs, seconds), else a record of 0 rounds."""
    from fedbench.runners.core.experiment import Experiment
    from fedbench.runners.outputs.report import Outcome

    exp = Experiment(spec)
    exp.state = held_state(spec)
    return exp.record(Outcome(status, error, exp.state.elapsed_before if exp.state else 0.0, exp.device,
                              exp.threads))


@dataclass
class Flight:
    """A run sent to Ray: its progress label, spec (``run.out`` as this process sees it)
    and the attempts lost so far."""

    label: str
    name: str
    spec: RunSpec
    retries: list[dict] = field(default_factory=list)


class Driver:
    """The sweep's runs in flight, and what becomes of each."""

    def __init__(self, ray, task, opts: dict, desk, cpus: float, cap: int, node_retries: int,
                 grace_s: float = GRACE_S):
        self.ray, self.task, self.opts, self.desk, self.cpus, self.cap = ray, task, opts, desk, cpus, cap
        self.node_retries, self.grace_s = node_retries, grace_s
        self.pending: dict = {}
        self.failed = self.retried = 0
        e = ray.exceptions
        self.lost = (e.NodeDiedError, e.WorkerCrashedError, e.ObjectLostError)

    def submit(self, f: Flight) -> None:
        self.pending[self.task.options(name=f.name, **self.opts).remote(f.spec, self.cpus, self.desk)] = f

    def placement(self, f: Flight) -> dict:
        try:
            return self.ray.get(self.desk.placement.remote(f.spec.run_id), timeout=30)
        except Exception:  # noqa: BLE001 - the record still gets written
            return {"host": None, "ray_node": None}

    def collect(self, ref, how: str | None = None) -> str | None:
        """The end of the run behind ``ref``: its record written here and read back, its line
        printed; its status, or None where it was sent again (its node died)."""
        f = self.pending.pop(ref)
        try:
            result = self.ray.get(ref)
        except self.lost as e:
            if how is None and len(f.retries) < self.node_retries:
                return self.retry(f, e)
            return self.land(f, None, "cancelled" if how else "failed",
                             _cancelled(how) if how else f"{first_line(e)} (after {len(f.retries)} retries)")
        except self.ray.exceptions.TaskCancelledError:
            return self.land(f, None, "cancelled", _cancelled(how or "task cancelled"))
        except self.ray.exceptions.RayError as e:  # the task raised: an error the run did not record
            cause = e.cause if isinstance(e, self.ray.exceptions.RayTaskError) else None
            return self.land(f, None, "failed", first_line(cause if isinstance(cause, BaseException) else e))
        return self.land(f, result, None, None, how)

    def retry(self, f: Flight, e: BaseException) -> None:
        where = self.placement(f)
        state = held_state(f.spec)
        rnd = state.rounds_done if state else 0
        f.retries.append({**where, "error": first_line(e), "checkpoint_round": rnd})
        self.retried += 1
        print(f"{f.label} [{_where(where)}]: lost ({first_line(e)}); started again from round {rnd} "
              f"(retry {len(f.retries)} of {self.node_retries})", flush=True)
        self.submit(f)
        return None

    def land(self, f: Flight, result: dict | None, status: str | None, error: str | None,
             how: str | None = None) -> str:
        """Write the record (the run's ``result``, or one made here from the checkpoint with
        ``status`` / ``error``), read it back, print the line; the status read back."""
        from fedbench.records import RecordError, read_record_file
        from fedbench.runners.cli.launch import summary_line
        from fedbench.runners.core.experiment import write_run_record
        from fedbench.runners.executors.ray_files import remove_paths, write_files

        out = f.spec.run.out
        try:
            if result is None:
                rec = record_from_checkpoint(f.spec, status, error)
                rec["env"].update(self.placement(f))
            else:
                rec = result["record"]
                if how is not None and rec["status"] == "cancelled":
                    rec["error"] = _cancelled(how)
                write_files(out, result["files"])
            rec["env"]["retries"] = f.retries
            path = write_run_record(f.spec, rec)
            back = read_record_file(path)
            if (back["status"], back["run"]["run_id"]) != (rec["status"], rec["run"]["run_id"]):
                raise RecordError(f"it reads back {back['status']} {back['run']['run_id']}")
            if result is not None:
                remove_paths(out, result["gone"])  # the run ended ok: its checkpoint goes, as in a local run
        except Exception as e:  # noqa: BLE001 - one run's record lost is one line, never the sweep's other runs
            self.failed += 1
            print(f"{f.label}: FAILED: its record could not be written and read back here ({first_line(e)})",
                  flush=True)
            return "failed"
        self.failed += back["status"] == "failed"
        print(f"{f.label} [{_where(back['env'])}]: {summary_line(back, path)}", flush=True)
        return back["status"]

    def cancel(self, how: str) -> int:
        """Interrupt the runs in flight (KeyboardInterrupt in the task: the run records
        ``cancelled`` and returns its record), land what comes back within the grace period,
        force-cancel the rest and record them here; how many were in flight."""
        refs = list(self.pending)
        for ref in refs:
            try:
                self.ray.cancel(ref)
            except Exception:  # noqa: BLE001
                pass
        deadline = time.monotonic() + self.grace_s
        left = refs
        while left and time.monotonic() < deadline:
            wait = min(0.5, max(0.01, deadline - time.monotonic()))
            ready, left = self.ray.wait(left, num_returns=len(left), timeout=wait)
            for ref in ready:
                self.collect(ref, how)
        for ref in left:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001
                pass
            self.land(self.pending.pop(ref), None, "cancelled",
                      f"{_cancelled(how)}; the run did not stop within {self.grace_s:g} s and was killed")
        return len(refs)


def _cancelled(how: str) -> str:
    return f"sweep cancelled ({how})"


def _where(where: dict) -> str:
    node = where.get("ray_node")
    return f"{where.get('host') or '?'}, node {node[:8] if node else '?'}"


def _gpus_default(ray) -> float:
    return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def _check(opts: "Parallel") -> tuple[float, int]:
    from fedbench.errors import UserError

    if opts.workers is not None and opts.workers < 1:
        raise UserError(f"--workers must be an integer >= 1; got {opts.workers}")
    cpus = 1.0 if opts.cpus_per_run is None else opts.cpus_per_run
    if not cpus > 0:  # NaN too
        raise UserError(f"--cpus-per-run must be a number > 0; got {cpus}")
    if opts.gpus_per_run is not None and opts.gpus_per_run < 0:
        raise UserError(f"--gpus-per-run must be a number >= 0; got {opts.gpus_per_run}")
    retries = NODE_RETRIES if opts.node_retries is None else opts.node_retries
    if retries < 0:
        raise UserError(f"--node-retries must be an integer >= 0; got {retries}")
    return cpus, retries


def run_pending(left: list[tuple[str, SweepRun]], n_runs: int, done: int, args: "Parallel",
                warn: Callable[[str], None], say: Callable[[str], None] = print) -> "SweepResult":
    """Run a sweep's runs not done yet (``left``: label and run; :func:`fedbench.runners.cli.sweeping.run_sweep`
    sorted them) as Ray tasks; ``say`` gets each line."""
    ray = require_ray()  # first: without Ray, the install line rather than ray.util's ImportError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from fedbench.runners.cli.sweeping import CANCELLED, FAILED, OK, SweepResult
    from fedbench.runners.executors.ray_files import DriverFiles
    from fedbench.runners.executors.ray_run import run_task

    cpus, node_retries = _check(args)
    # the records directory as this process sees it, whatever the worker's directory
    todo = deque(Flight(label, f"{r.label} ({r.spec.run_id})",
                        dataclasses.replace(r.spec, run=dataclasses.replace(r.spec.run,
                                                                            out=os.path.abspath(r.spec.run.out))))
                 for label, r in left)
    if not todo:
        say(f"sweep: {n_runs} runs, {done} already done, 0 failed")
        return SweepResult(OK, n_runs, done, 0)
    try:
        import torch

        n_gpus = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        n_gpus = 0
    started = init_ray(args.address, num_cpus=max(1, math.ceil((args.workers or 1) * cpus)), num_gpus=n_gpus)
    gpus = _gpus_default(ray) if args.gpus_per_run is None else args.gpus_per_run
    opts = dict(num_cpus=cpus, num_gpus=gpus, max_retries=0)  # node loss is retried here, from the checkpoint
    env = runtime_env()
    if env:
        opts["runtime_env"] = env
    desk = None
    stopped = None
    try:
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        desk = ray.remote(DriverFiles).options(num_cpus=0, max_concurrency=8, scheduling_strategy=here,
                                               **({"runtime_env": env} if env else {})).remote()
        driver = Driver(ray, ray.remote(run_task), opts, desk, cpus, args.workers or len(todo), node_retries)
        with cancel_on_signals() as guard:  # inside: a second signal while the runs write their records is logged
            try:
                while todo or driver.pending:
                    while todo and len(driver.pending) < driver.cap:
                        driver.submit(todo.popleft())
                    ready, _ = ray.wait(list(driver.pending), num_returns=1)
                    for ref in ready:
                        if driver.collect(ref) == "cancelled":
                            stopped = "a run was cancelled"
                    if stopped:
                        raise KeyboardInterrupt
            except KeyboardInterrupt:  # (Ray may hand on the guard's Cancelled as a plain KeyboardInterrupt)
                stopped = "SIGTERM" if signal.SIGTERM in guard.fired else stopped or "Ctrl-C"
                n = driver.cancel(stopped)
                print(f"fedbench: sweep cancelled ({n} runs in flight stopped, {len(todo)} not started)",
                      file=sys.stderr)
    finally:
        if desk is not None:
            try:
                ray.kill(desk)
            except Exception:  # noqa: BLE001 - gone with its node
                pass
        if started:
            ray.shutdown()
    if stopped:
        return SweepResult(CANCELLED, n_runs, done, driver.failed)
    more = f"; {driver.retried} retried after losing their node" if driver.retried else ""
    say(f"sweep: {n_runs} runs, {done} already done, {driver.failed} failed{more}")
    return SweepResult(FAILED if driver.failed else OK, n_runs, done, driver.failed)


__all__ = ["GRACE_S", "NODE_RETRIES", "held_state", "record_from_checkpoint", "run_pending"]
