"""Scoring the global model: the one place a run evaluates.

``Method.evaluation == "global"``: the global model (the driver's model of the default
architecture with the method's ``eval_tensors``) on the test split the server did not
hold out. ``"local"`` (personalised methods): every client's own model (its private state
+ the global part) on its own local test split, through the executor (one client's state
in memory at a time), averaged over the clients that have trained (those with a private
state in the store); a client never sampled would be scored with a fresh model, so its
score is kept apart (``EvalResult.untrained_clients``). Before any client trained (the
initial evaluation) every client is scored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedbench.methods.base import ClientPlan, Method, MethodState
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.core.federation import Federation
from fedbench.runners.core.store import ClientStore
from fedbench.runners.executors.worker import EvalJob, evaluate_model
from fedbench.tasks.base import EvalResult, Task


class Evaluator:
    def __init__(self, method: Method, task: Task, am: AdapterModel, fed: Federation, store: ClientStore,
                 domain_names: list[str] | None, precision: str = "fp32"):
        self.method, self.task, self.am, self.fed, self.store = method, task, am, fed, store
        self.domain_names, self.precision = domain_names, precision

    def evaluate(self, state: MethodState, executor: Any) -> tuple[EvalResult, dict[int, float] | None]:
        """The run's score of ``state`` and, for local evaluation, each client's score."""
        m = self.method
        if m.evaluation == "local":
            return self._local(state, executor)
        return evaluate_model(self.am, m, self.task, m.eval_tensors(state), self.fed.test, self.fed.test_domains,
                              self.domain_names, m.eval_blocks(state), self.precision), None

    def _local(self, state: MethodState, executor: Any) -> tuple[EvalResult, dict[int, float]]:
        tensors = self.method.eval_tensors(state)
        fed = self.fed

        def jobs():  # one client's private state in memory at a time (it may be on disk)
            for c in range(fed.n_clients):
                arch = self.method.client_arch(c)
                keys = self.method.private_keys(ClientPlan(c, 0, (), arch=arch))
                yield EvalJob(c, arch, tensors, self.store.get(c), fed.local.test[c], keys)

        every = executor.evaluate_local(jobs())
        scored, untrained = split_trained(dict(enumerate(every)), set(self.store.clients()))
        results = list(scored.values())
        per_client = {c: r.value for c, r in scored.items()}
        vals = np.array(list(per_client.values()), dtype=np.float64)
        name = results[0].metric_name if results else self.task.metric_name
        extra = {"worst_client": float(vals.min())}
        for key in sorted({k for r in results for k in r.extra}):  # e.g. every named output of eval_logits
            got = [r.extra[key] for r in results if key in r.extra and np.isfinite(r.extra[key])]
            if got:
                extra[key] = float(np.mean(got))  # mean over clients, like the headline
        return (EvalResult(name, float(vals.mean()), None, extra, {c: r.value for c, r in untrained.items()}),
                per_client)


def split_trained(per_client: dict[int, Any], trained: set[int]) -> tuple[dict[int, Any], dict[int, Any]]:
    """(the clients to score, the never-trained ones kept apart): the clients in ``trained``
    and the rest; every client is scored while none has trained (the untrained model)."""
    if not trained:
        return dict(per_client), {}
    return ({c: v for c, v in per_client.items() if c in trained},
            {c: v for c, v in per_client.items() if c not in trained})


__all__ = ["Evaluator", "split_trained"]
