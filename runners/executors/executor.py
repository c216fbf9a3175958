"""Executors: where a round's client jobs run.

The round loop (:mod:`fedbench.runners.core.rounds`) is the same for every executor; an
executor only executes a round's jobs (``execute``), evaluates clients' own models
(``evaluate_local``, personalised methods) and closes. ``local`` runs them one after
another in this process with the driver's worker; other executors register themselves
in :data:`EXECUTORS` (``ray``: :mod:`fedbench.runners.executors.ray_executor`) and are chosen with
``run.executor`` (``--executor``; ``--runner`` is its older name). Executors know no
method by name, and every one gives the same record: each job carries its own seed.
The round loop hands an executor a :data:`StepListener` (``listen``): ``local`` tells it
of every local step of its clients; an executor whose clients train in other processes
may ignore it (the live view then moves per client). After a round's jobs the loop asks
``placement``: how each trained client ran (the record's ``run.executor_placement``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from fedbench.registry import Registry
from fedbench.runners.executors.train import StepHook
from fedbench.runners.executors.worker import ClientJob, ClientResult, ClientWorker, EvalJob, WorkerSpec
from fedbench.tasks.base import EvalResult

EXECUTORS: Registry = Registry("executor")

#: ``listener(rnd, client, step, steps)``: client ``client`` of round ``rnd`` finished local step
#: ``step`` (1-based) of its ``steps``
StepListener = Callable[[int, int, int, int], None]


class Executor:
    """Base class. ``worker``: the driver's worker (built by ``worker_spec.build``);
    ``worker_spec`` and ``data``: what an executor in other processes builds its own from;
    ``profiles``: the clients' static tier profiles the worker was built with."""

    def __init__(self, worker: ClientWorker, worker_spec: WorkerSpec, data: Any, profiles: dict):
        self.worker = worker
        self.listener: StepListener | None = None

    def listen(self, listener: StepListener | None) -> None:
        """Tell ``listener`` of the local steps of the clients executed from now on (None:
        stop). Executors that honour it call it in this process; the default keeps it, and
        an executor whose clients train elsewhere may never call it."""
        self.listener = listener

    def execute(self, jobs: Iterable[ClientJob]) -> Iterable[ClientResult]:
        """Run ``jobs`` (an iterator: read lazily) and give their results in job order (a
        generator may stream them)."""
        raise NotImplementedError

    def evaluate_local(self, jobs: Iterable[EvalJob]) -> list[EvalResult]:
        """Evaluate ``jobs`` (an iterator: one client's state at a time), results in order."""
        raise NotImplementedError

    def placement(self, rnd: int, clients: Sequence[int]) -> dict[str, list[int]]:
        """{how they ran: clients} for ``clients``, the clients of round ``rnd`` this
        executor has just trained (job order). Default: all of them under the name the
        executor is registered as; an executor that runs clients in several ways (``packed``)
        says which ran how."""
        return {registered_name(type(self)): list(clients)}

    def meter_counts(self) -> tuple[int, int]:
        """(step shapes measured, measurements reused) by the workers so far."""
        m = self.worker.meter
        return (m.measured, m.reused) if m is not None else (0, 0)

    def close(self) -> None:
        pass


def registered_name(cls: type) -> str:
    """The key ``cls`` (or the nearest registered class it derives from) has in :data:`EXECUTORS`."""
    keys = {e.obj: e.key for e in EXECUTORS.entries()}
    return next((keys[c] for c in cls.__mro__ if c in keys), cls.__name__)


@EXECUTORS.register("local", "clients one after another in this process, one model per architecture")
class LocalExecutor(Executor):
    def execute(self, jobs):
        for job in jobs:  # one client at a time: its private state is stored before the next loads
            yield self.worker.run(job, self.step_hook(job))

    def evaluate_local(self, jobs):
        return [self.worker.evaluate(job) for job in jobs]

    def step_hook(self, job: ClientJob) -> StepHook | None:
        """The worker's ``on_step`` for ``job``: the listener, told the job's round and client."""
        listener = self.listener
        if listener is None:
            return None
        return lambda step, steps: listener(job.round, job.plan.client, step, steps)


__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "StepListener", "registered_name"]
