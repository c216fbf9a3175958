"""A test executor that records every job it runs and every result: the seam tests use to
look at what crossed between the server and the clients (``run.executor="spy"``)."""

from __future__ import annotations

import contextlib

from fedbench.runners.executors.executor import EXECUTORS, LocalExecutor


class SpyExecutor(LocalExecutor):
    jobs: list = []
    results: list = []

    def execute(self, jobs):
        for job in jobs:
            res = self.worker.run(job)
            SpyExecutor.jobs.append(job)
            SpyExecutor.results.append(res)
            yield res


@contextlib.contextmanager
def spying():
    """Register the "spy" executor for the block; yields the executor class, whose ``jobs``
    and ``results`` lists hold what ran, in order."""
    SpyExecutor.jobs, SpyExecutor.results = [], []
    EXECUTORS.add("spy", SpyExecutor, "test executor")
    try:
        yield SpyExecutor
    finally:
        EXECUTORS.remove("spy")
