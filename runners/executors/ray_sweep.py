"""Parallel sweeps: ``fedbench sweep PRESET --workers N [--address ADDR]``.

The sweep's runs (already expanded and validated by :func:`~fedbench.runners.core.sweep.load_sweep`)
become Ray tasks, at most ``--workers`` in flight, on a local Ray instance started for the
sweep (``--workers`` x ``--cpus-per-run`` cores, the machine's GPUs) or on the cluster at
``--address``. Each task asks for its resources (``--cpus-per-run``, default 1;
``--gpus-per-run``, default one GPU where there are GPUs, fractions allowed), sets its torch
threads to its cores and runs the :class:`~fedbench.runners.core.experiment.Experiment` as
``fedbench run`` would; its record lands in the run's records directory (atomic writes).
Finished runs are skipped before anything is sent; a run that fails is recorded ``failed``
(by the run itself, or here when its worker process died) and the sweep goes on; Ctrl-C
(or SIGTERM) cancels the runs in flight (each writes its ``cancelled`` record when it can),
then force-cancels what is left and shuts Ray down, leaving no worker behind.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections import deque
from typing import Callable

from fedbench.runners.executors.ray_executor import init_ray, require_ray, runtime_env
from fedbench.runners.outputs.report import Outcome
from fedbench.runners.core.signals import cancel_on_signals
from fedbench.runners.core.spec import RunSpec
from fedbench.runners.core.sweep import SweepRun


def _run_one(spec: RunSpec, cpus: float) -> tuple[str, str, str]:
    """One run in a Ray worker: (status, record path, summary line)."""
    import dataclasses

    import torch

    from fedbench.runners.cli.launch import execute, summary_line
    from fedbench.runners.core.environment import resolve_threads

    if spec.run.threads is None:  # the cores given to the run (1 for the tiny tasks); not in the run id
        threads = min(max(1, int(cpus)), resolve_threads(None, spec.task_cls.tiny))
        spec = dataclasses.replace(spec, run=dataclasses.replace(spec.run, threads=threads))
    torch.set_num_threads(spec.run.threads)
    rec, path = execute(spec, progress=False)
    return rec["status"], str(path), summary_line(rec, path)


def record_crash(spec: RunSpec, error: str) -> tuple[str, str]:
    """A run whose worker died before it wrote its record: a ``failed`` record from here."""
    from fedbench.runners.core.experiment import Experiment

    exp = Experiment(spec)
    rec = exp.record(Outcome("failed", error, 0.0, exp.device, exp.threads))
    path = exp.write(rec)
    return str(path), f"FAILED: {error} -> {path}"


def _gpus_default(ray) -> float:
    return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def run_sweep(runs: list[SweepRun], args, warn: Callable[[str], None]) -> int:
    """Run the sweep's runs that are not done as Ray tasks; returns the exit status
    (0 all ok, 1 some failed, 130 cancelled)."""
    from fedbench.errors import UserError
    from fedbench.runners.core import sweep

    ray = require_ray()
    workers = args.workers
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be an integer >= 1; got {workers}")
    cpus = 1.0 if args.cpus_per_run is None else args.cpus_per_run
    if not cpus > 0:  # NaN too
        raise UserError(f"--cpus-per-run must be a number > 0; got {cpus}")
    if args.gpus_per_run is not None and args.gpus_per_run < 0:
        raise UserError(f"--gpus-per-run must be a number >= 0; got {args.gpus_per_run}")

    left, done = sweep.pending(runs, warn)
    # the records directory as this process sees it, whatever the worker's directory
    todo = deque((label, dataclasses.replace(r.spec, run=dataclasses.replace(r.spec.run,
                                                                          out=os.path.abspath(r.spec.run.out))))
                 for label, r in left)
    if not todo:
        print(f"sweep: {len(runs)} runs, {done} already done, 0 failed")
        return 0

    import math

    try:
        import torch

        n_gpus = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        n_gpus = 0
    started = init_ray(args.address, num_cpus=max(1, math.ceil((workers or 1) * cpus)), num_gpus=n_gpus)
    gpus = _gpus_default(ray) if args.gpus_per_run is None else args.gpus_per_run
    opts = dict(num_cpus=cpus, num_gpus=gpus, max_retries=0)
    env = runtime_env()
    if env:
        opts["runtime_env"] = env
    remote = ray.remote(_run_one).options(**opts)
    cap = workers or len(todo)
    pending: dict = {}
    failed = 0
    cancelled = False
    try:
        with cancel_on_signals():
            while todo or pending:
                while todo and len(pending) < cap:
                    label, r = todo.popleft()
                    pending[remote.remote(r, cpus)] = (label, r)
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    label, r = pending.pop(ref)
                    try:
                        status, _, line = ray.get(ref)
                    except ray.exceptions.RayError as e:  # an error the run did not record, or its worker died
                        cause = getattr(e, "cause", None) if isinstance(e, ray.exceptions.RayTaskError) else None
                        cause = cause if isinstance(cause, BaseException) else e
                        status, error = "failed", f"{type(cause).__name__}: {(str(cause).splitlines() or [''])[0]}"
                        try:
                            _, line = record_crash(r, error)
                        except Exception as e2:  # noqa: BLE001 - not even a record: say so, go on
                            line = f"FAILED: {error} (no record: {e2})"
                    print(f"{label}: {line}", flush=True)
                    if status == "cancelled":
                        cancelled = True
                    failed += status == "failed"
                if cancelled:
                    raise KeyboardInterrupt
    except KeyboardInterrupt:
        cancelled = True
        _cancel(ray, pending)
        print(f"fedbench: sweep cancelled ({len(pending)} runs in flight stopped, {len(todo)} not started)",
              file=sys.stderr)
    finally:
        if started:
            ray.shutdown()
    if cancelled:
        return 130
    print(f"sweep: {len(runs)} runs, {done} already done, {failed} failed")
    return 1 if failed else 0


def _cancel(ray, pending: dict, grace_s: float = 10.0) -> None:
    """Interrupt the runs in flight (KeyboardInterrupt in the task: the run writes its
    ``cancelled`` record), give them ``grace_s`` to finish, then force-cancel the rest."""
    refs = list(pending)
    if not refs:
        return
    for ref in refs:
        try:
            ray.cancel(ref)
        except Exception:  # noqa: BLE001
            pass
    deadline = time.monotonic() + grace_s
    left = refs
    while left and time.monotonic() < deadline:
        try:
            _, left = ray.wait(left, num_returns=len(left), timeout=0.5)
        except Exception:  # noqa: BLE001
            break
    for ref in left:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001
            pass


__all__ = ["run_sweep"]
