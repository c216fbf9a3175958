"""The stub executor (``run.executor="stub"``) for bookkeeping tests: the CLI, records,
sweeps and outputs, which check what a run writes, not what it learns.

A client trains no step: it uploads the tensors it was sent (and the method's client
statistics), keeps its private state, and reports a fixed cost (:data:`STEP_FLOPS` forward
and backward per step, a loss of :data:`LOSS`, :data:`ACCOUNTED_BYTES` of accounted memory,
one step per client-round). Everything else runs as in a real run: sampling, payloads and
traffic, aggregation, evaluation, checkpoints, records, progress. Tests whose meaning is the
training (learning, FLOPs, memory, executors agreeing) keep the real executors.
Registered for the whole test session by ``tests/conftest.py``.
"""

from __future__ import annotations

import dataclasses

from fedbench.runners.executors.executor import EXECUTORS, LocalExecutor
from fedbench.runners.executors.worker import ClientJob, ClientResult

#: the fixed cost of a stub client-round
STEP_FLOPS, LOSS, ACCOUNTED_BYTES = 2e6, 1.5, 3 * 2**20


class StubExecutor(LocalExecutor):
    """Clients one after another in this process, each returning at once (no local step)."""

    def execute(self, jobs):
        for job in jobs:
            yield self.stub(job)

    def stub(self, job: ClientJob) -> ClientResult:
        worker = self.worker
        saved = worker.settings, worker.meter
        worker.settings, worker.meter = dataclasses.replace(saved[0], max_steps=0), None  # no step, no meter
        try:
            res = worker.run(job, self.step_hook(job))
        finally:
            worker.settings, worker.meter = saved
        cost = res.cost
        cost.steps, cost.first_batch = 1, 1
        cost.flops_forward_step = cost.flops_backward_step = STEP_FLOPS
        cost.flops_total += 2 * STEP_FLOPS
        cost.train_loss = cost.first_loss = LOSS
        cost.accounted_bytes = ACCOUNTED_BYTES
        cost.breakdown = {"params": ACCOUNTED_BYTES, "grads": 0, "optimizer": 0, "activations": 0}
        return res


def register() -> None:
    """Make ``stub`` an executor (once)."""
    if "stub" not in EXECUTORS.keys():
        EXECUTORS.add("stub", StubExecutor, "test executor: no local training (bookkeeping tests)")
