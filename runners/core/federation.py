"""The federation of a run: who the clients are, what each holds, what the server keeps.

Built once at set-up from the spec and the task's data (:func:`build_federation`): the
partition of the training split into clients (``run.setting``), each client's local
train/val/test split where asked (``run.local_split``), the test examples the server
holds out (``run.server_holdout``: never evaluated, in every run alike) and the proxy
set a method's server uses among them. Everything here is fixed for the run and derived
from the run seed, so a resumed run rebuilds it identically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedbench.errors import UserError
from fedbench.runners.core.seeds import rng_for
from fedbench.tasks.base import TaskData, subset
from fedbench.tasks.local_split import LocalSplit, split_local
from fedbench.tasks.partition import Partition, n_clients_for, parse_setting, partition


@dataclass
class Federation:
    n_clients: int
    per_round: int
    part: Partition
    local: LocalSplit | None  # each client's local train/val/test (None: no local split)
    train_indices: list[np.ndarray]  # each client's training examples
    sizes: list[int]  # len(train_indices[c])
    holdout_indices: list[int]  # test examples held out for the server (never evaluated)
    proxy_indices: list[int]  # the first of them the method's server uses as its proxy set
    test: Any  # the evaluated test split (held-out examples removed)
    test_domains: np.ndarray | None
    proxy: Any | None  # the proxy examples, or None


def check_per_round(per_round: int | None, n_clients: int) -> None:
    """More clients a round than the federation has: one :class:`UserError` line (checked when
    the spec is built where the count is known then, else once the data gives it)."""
    if per_round is not None and per_round > n_clients:
        raise UserError(f"--per-round {per_round} > number of clients {n_clients}")


def build_federation(spec, task_holdout: int, data: TaskData) -> Federation:
    """The federation of ``spec`` over ``data``; ``task_holdout``: the task's paper size of
    the server's hold-out (``Task.server_holdout``)."""
    r = spec.run
    setting = parse_setting(r.setting)
    n_domains = None if data.domain_names is None else len(data.domain_names)
    if setting.needs_domains and data.train_domains is None:
        raise UserError(f"setting {setting.raw!r} needs a task with domains; {spec.task!r} has none")
    n_clients = n_clients_for(setting, r.clients, n_domains)
    check_per_round(r.per_round, n_clients)
    per_round = min(n_clients, r.per_round or min(10, n_clients))
    part = partition(setting, data.train_labels, n_clients, r.seed, domains=data.train_domains,
                     n_classes=data.n_classes)
    local = split_local(part.client_indices, r.local_split, r.seed) if r.local_split else None
    train_indices = local.train if local else part.client_indices
    held, proxy_ix, keep = _hold_out(spec, task_holdout, len(data.test))
    test = subset(data.test, keep) if len(held) else data.test
    return Federation(
        n_clients=n_clients, per_round=per_round, part=part, local=local, train_indices=train_indices,
        sizes=[int(len(ix)) for ix in train_indices], holdout_indices=held.tolist(), proxy_indices=proxy_ix.tolist(),
        test=test, test_domains=None if data.test_domains is None else data.test_domains[keep],
        proxy=subset(data.test, proxy_ix) if len(proxy_ix) else None,
    )


def _hold_out(spec, task_holdout: int, n_test: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(held out, proxy, kept) test indices, sorted.

    ``run.server_holdout`` (default: the task's paper size, at most half the split) test
    examples, drawn with the run seed, are never evaluated, whether or not the method's
    server uses them, so every method on a task and seed is scored on the same examples.
    A method with a proxy set (FIM-HLA) uses the first ``proxy_size_for`` of them."""
    given = spec.run.server_holdout
    n_hold = min(task_holdout, n_test // 2) if given is None else given
    if n_hold >= n_test:
        raise UserError(f"run.server_holdout={n_hold} leaves nothing to evaluate (test split: {n_test})")
    need = spec.method_cls.proxy_size_for(spec.method_config, n_hold)
    if need > n_hold:
        raise UserError(f"{spec.method} needs a proxy set of {need} examples but the server holds out "
                        f"{n_hold} (set run.server_holdout >= {need})")
    perm = rng_for(spec.run.seed, "holdout").permutation(n_test)
    return np.sort(perm[:n_hold]), np.sort(perm[:need]).astype(np.int64), np.sort(perm[n_hold:])


__all__ = ["Federation", "build_federation"]
