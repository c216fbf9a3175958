"""Engines drive the rounds of an :class:`~fedbench.runners.experiment.Experiment`.

The round loop is the same for every engine: sample clients (their own random stream),
draw tiers, ask the method for plans, build a :class:`ClientJob` per client (payload +
private state from the ClientStore), run the jobs, keep the private state that comes
back, aggregate, evaluate, call the callbacks. Engines differ only in *where* jobs run
(``execute`` / ``evaluate_local``): ``local`` runs them one after another in this process
with one worker; other engines (``ray``) register themselves in :data:`ENGINES` and are
chosen with ``run.runner``. Engines know no method by name.
"""

from __future__ import annotations

import time
from typing import Iterable, Iterator

import numpy as np

from fedbench.methods.base import ClientUpdate, MethodState
from fedbench.registry import Registry
from fedbench.runners.callbacks import RoundLog
from fedbench.runners.meters import ClientCost, Stopwatch
from fedbench.runners.seeds import rng_for, seed_for
from fedbench.runners.worker import ClientJob, ClientResult, EvalJob
from fedbench.tasks.base import EvalResult

ENGINES: Registry = Registry("runner")


class Engine:
    """Base class: the round loop; subclasses implement ``execute`` and ``evaluate_local``."""

    def __init__(self, exp):
        self.exp = exp

    # -- where clients run ---------------------------------------------------------------
    def execute(self, jobs: Iterable[ClientJob]) -> Iterable[ClientResult]:
        """Run ``jobs`` and give their results in job order (a generator may stream them)."""
        raise NotImplementedError

    def evaluate_local(self, jobs: Iterable[EvalJob]) -> list[EvalResult]:
        """Evaluate ``jobs`` (an iterator: one client's state at a time), results in order."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    # -- the loop --------------------------------------------------------------------------
    def run(self, state: MethodState, first_round: int = 1) -> MethodState:
        exp = self.exp
        for rnd in range(first_round, exp.run_cfg.rounds + 1):
            state = self.round(rnd, state)
        return state

    def round(self, rnd: int, state: MethodState) -> MethodState:
        exp, seed = self.exp, self.exp.run_cfg.seed
        with Stopwatch(exp.device) as sw:
            sampled = sorted(int(c) for c in rng_for(seed, "sample", rnd).choice(
                exp.n_clients, size=exp.per_round, replace=False))
            profiles = exp.tiers.profiles(sampled, rnd, rng_for(seed, "tier", rnd), exp.sizes)
            plans = exp.method.plan(rnd, profiles, state, rng_for(seed, "method", rnd))
            entries, skipped = [], []  # (plan, payload) of the clients that train
            for p in profiles:
                plan = plans[p.client]
                if plan.skip:
                    skipped.append(ClientCost(client=p.client, tier=p.tier))
                    continue
                entries.append((plan, exp.method.client_payload(state, plan)))

            def jobs() -> Iterator[ClientJob]:  # private state read when the job is handed out
                for plan, payload in entries:
                    yield ClientJob(rnd, plan, payload, exp.store.get(plan.client), exp.train_indices[plan.client],
                                    seed_for(seed, "client", rnd, plan.client))

            costs, updates = [], []  # results are not kept: their private state went to the store
            for (plan, payload), res in zip(entries, self.execute(jobs())):
                traffic = exp.method.traffic(plan, payload, res.upload)
                res.cost.down_bytes, res.cost.up_bytes = traffic.down_bytes, traffic.up_bytes
                res.cost.down_variants = dict(traffic.down_variants)
                exp.store.put(plan.client, res.private)  # kept by the store, not by this round
                costs.append(res.cost)
                updates.append(ClientUpdate(plan.client, res.upload, exp.sizes[plan.client], plan,
                                            res.cost.train_loss))
            for cost in skipped + costs:
                for cb in exp.callbacks:
                    cb.on_client_end(exp, rnd, cost)
            state = exp.method.aggregate(state, updates)
        exp.state = state
        metric, eval_seconds = None, 0.0
        if rnd % exp.run_cfg.eval_every == 0 or rnd == exp.run_cfg.rounds:
            t0 = time.perf_counter()
            exp.last_eval = exp.evaluate(state, self)
            eval_seconds = time.perf_counter() - t0
            metric = exp.last_eval.value
        losses = [c.train_loss for c in costs if c.train_loss is not None]
        log = RoundLog(rnd, metric, float(np.mean(losses)) if losses else None, sw.seconds,
                       sum(c.seconds for c in costs), eval_seconds, sampled)
        for cb in exp.callbacks:
            cb.on_round_end(exp, log)
        return state


@ENGINES.register("local", "clients one after another in this process, one model per architecture")
class LocalEngine(Engine):
    def execute(self, jobs):
        for job in jobs:  # one client at a time: its private state is stored before the next loads
            yield self.exp.worker.run(job)

    def evaluate_local(self, jobs):
        return [self.exp.worker.evaluate(job) for job in jobs]
