"""The one round loop: sample, plan, build jobs, execute, aggregate, evaluate, callbacks.

:func:`run_round` is the whole federated round for every method and every executor:

1. sample ``per_round`` clients (a random stream of its own per round);
2. draw each sampled client's tier (``run.dynamic``) and ask the method for plans;
3. build a :class:`~fedbench.runners.executors.worker.ClientJob` per training client: its payload
   and its private state from the client store, read when the job is handed out;
4. the executor runs the jobs (``local``: one after another; ``ray``: on actors);
5. each result's traffic is counted through ``Method.traffic`` (the one place) on the plan
   the client trained (``Method.client_select`` may have chosen it on the client) and held
   to ``Method.upload_budget``, its private state goes back to the store, its upload
   becomes a ``ClientUpdate``;
6. the method aggregates; the global model is evaluated on the round's schedule;
7. callbacks get the round's log and the run state; any may return a ``Stop``.

The loop knows no method by name and touches no model: workers train, the
:class:`~fedbench.runners.core.evaluation.Evaluator` scores.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from fedbench.methods.base import ClientUpdate, Method
from fedbench.runners.outputs.callbacks import Callback, Stop
from fedbench.runners.core.evaluation import Evaluator
from fedbench.runners.executors.executor import Executor
from fedbench.runners.core.federation import Federation
from fedbench.runners.cost.meters import ClientCost, Stopwatch
from fedbench.runners.core.seeds import rng_for, seed_for
from fedbench.runners.budget.simtime import SimClock
from fedbench.runners.core.state import RoundLog, RunState
from fedbench.runners.core.store import ClientStore
from fedbench.runners.core.tiers import TierAssigner
from fedbench.runners.executors.worker import ClientJob


@dataclass
class Loop:
    """What the round loop works with (built by the experiment at set-up)."""

    seed: int
    rounds: int
    eval_every: int
    fed: Federation
    tiers: TierAssigner
    method: Method  # the driver's instance: plans, payloads, aggregation
    store: ClientStore
    executor: Executor
    evaluator: Evaluator
    callbacks: Sequence[Callback]
    device: object  # torch.device of the round's stopwatch
    clock: SimClock | None = None  # --devices: simulated seconds of each round (and the deadline's drops)


def evaluates(rnd: int, rounds: int, eval_every: int) -> bool:
    """Whether round ``rnd`` is scored: every ``eval_every`` rounds and the last."""
    return rnd % eval_every == 0 or rnd == rounds


def run_rounds(loop: Loop, state: RunState, first_round: int = 1) -> Stop | None:
    """Rounds ``first_round``..``loop.rounds``; the first callback's stop ends the loop."""
    for rnd in range(first_round, loop.rounds + 1):
        stop = run_round(loop, rnd, state)
        if stop is not None:
            return stop
    return None


def run_round(loop: Loop, rnd: int, state: RunState) -> Stop | None:
    fed, method = loop.fed, loop.method
    with Stopwatch(loop.device) as sw:
        sampled = sorted(int(c) for c in rng_for(loop.seed, "sample", rnd).choice(
            fed.n_clients, size=fed.per_round, replace=False))
        profiles = loop.tiers.profiles(sampled, rnd, rng_for(loop.seed, "tier", rnd), fed.sizes)
        plans = method.plan(rnd, profiles, state.method, rng_for(loop.seed, "method", rnd))
        entries, skipped = [], []  # (plan, payload) of the clients that train
        for p in profiles:
            plan = plans[p.client]
            if plan.skip:
                skipped.append(ClientCost(client=p.client, tier=p.tier))
            else:
                entries.append((plan, method.client_payload(state.method, plan)))

        def jobs() -> Iterator[ClientJob]:  # private state read when the job is handed out
            for i, (plan, payload) in enumerate(entries):
                for cb in loop.callbacks:
                    cb.on_client_start(rnd, plan.client, i, len(entries))
                yield ClientJob(rnd, plan, payload, loop.store.get(plan.client), fed.train_indices[plan.client],
                                seed_for(loop.seed, "client", rnd, plan.client))

        costs, updates = [], []  # results are not kept: their private state went to the store
        for cost in skipped:
            state.costs.append((rnd, cost))
            for cb in loop.callbacks:
                cb.on_client_end(rnd, cost)

        def progress(r: int, client: int, step: int, steps: int) -> None:  # from inside a client's training
            for cb in loop.callbacks:
                cb.on_client_progress(r, client, step, steps)

        loop.executor.listen(progress)
        for (_, payload), res in zip(entries, loop.executor.execute(jobs())):
            plan = res.plan  # as the client trained it (Method.client_select)
            traffic = method.traffic(plan, payload, res.upload)
            budget = method.upload_budget(plan)
            if budget is not None and traffic.up_bytes > budget:
                raise RuntimeError(f"client {plan.client} sent {traffic.up_bytes} bytes up in round {rnd}, over "
                                   f"its upload budget of {budget} (Method.upload_budget)")
            res.cost.down_bytes, res.cost.up_bytes = traffic.down_bytes, traffic.up_bytes
            res.cost.down_variants = dict(traffic.down_variants)
            loop.store.put(plan.client, res.private)  # kept by the store, not by this round
            costs.append(res.cost)
            state.costs.append((rnd, res.cost))
            updates.append(ClientUpdate(plan.client, res.upload, fed.sizes[plan.client], plan, res.cost.train_loss))
            for cb in loop.callbacks:
                cb.on_client_end(rnd, res.cost)
        sim_seconds, dropped = loop.clock.round(costs) if loop.clock is not None else (None, [])
        updates = [u for u in updates if u.client not in set(dropped)]  # missed the deadline: not aggregated
        placement = loop.executor.placement(rnd, [plan.client for plan, _ in entries])
        if rnd == 1 and state.initial_loss is None:
            first = [c.first_loss for c in costs if c.first_loss is not None]
            state.initial_loss = float(np.mean(first)) if first else None
        state.method = method.aggregate(state.method, updates)
    metric, eval_seconds = None, 0.0
    if evaluates(rnd, loop.rounds, loop.eval_every):
        t0 = time.perf_counter()
        state.last_eval, per_client = loop.evaluator.evaluate(state.method, loop.executor)
        if per_client is not None:
            state.per_client = per_client
        eval_seconds = time.perf_counter() - t0
        metric = state.last_eval.value
    losses = [c.train_loss for c in costs if c.train_loss is not None]
    log = RoundLog(rnd, metric, float(np.mean(losses)) if losses else None, sw.seconds,
                   sum(c.seconds for c in costs), eval_seconds, sampled, sim_seconds, dropped,
                   sum(c.down_bytes + c.up_bytes for c in costs), placement)
    state.logs.append(log)
    stops = [cb.on_round_end(log, state) for cb in loop.callbacks]
    for cb, s in zip(loop.callbacks, stops):
        if s is not None and not isinstance(s, Stop):
            raise TypeError(f"callback {type(cb).__name__}.on_round_end returned {type(s).__name__}, not a Stop or None")
    return next((s for s in stops if s is not None), None)


__all__ = ["Loop", "evaluates", "run_round", "run_rounds"]
