"""An Experiment: one run of a method on a task, from resolved configs to its record.

It resolves the configs, loads the task's data once, partitions it (and splits each
client's share into local train/val/test where asked), assigns tiers, holds out the
server's test examples, builds the model pool, the method, the client store and the
worker, hands the rounds to an engine (``run.runner``: :data:`~fedbench.runners.engine.ENGINES`)
and builds the record. It never trains a client itself: the worker does.

A run always ends with a result record: ``ok``, or ``failed`` (exception, NaN loss,
divergence, CUDA OOM) / ``cancelled`` (Ctrl-C, SIGTERM) with the rounds it finished.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedbench
from fedbench.config import build_config, config_to_dict
from fedbench.errors import UserError
from fedbench.methods import METHODS
from fedbench.methods.base import Method, MethodContext, MethodState
from fedbench import records
from fedbench.runners import checkpoint
from fedbench.runners.callbacks import Callback, Diverged, DivergenceGuard, History
from fedbench.runners.config import RunConfig
from fedbench.runners.engine import ENGINES
from fedbench.runners import ray_engine  # noqa: F401 - registers the "ray" engine (imports ray only when used)
from fedbench.runners.environment import env_info, git_info, resolve_device, resolve_threads, run_identity
from fedbench.runners.seeds import rng_for
from fedbench.runners.server import ServerTools
from fedbench.runners.store import ClientStore
from fedbench.runners.summary import cost_section, results_section, target_section
from fedbench.runners.tiers import TierAssigner, tier_ranks_for
from fedbench.runners.train import NonFiniteLoss, TrainSettings
from fedbench.runners.worker import ClientWorker, EvalJob, ModelPool, WorkerSpec, evaluate_model
from fedbench.tasks import TASKS
from fedbench.tasks.base import EvalResult, Task, TaskData, subset
from fedbench.tasks.local_split import split_local
from fedbench.tasks.partition import n_clients_for, parse_setting, partition

log = logging.getLogger(__name__)


class Cancelled(KeyboardInterrupt):
    """SIGTERM (what schedulers and ``timeout`` send), handled like Ctrl-C."""


class Experiment:
    def __init__(self, method: str, task: str, run: RunConfig | dict | None = None,
                 method_config: dict | None = None, task_config: dict | None = None,
                 callbacks: list[Callback] | None = None, data: TaskData | None = None):
        self.method_key = METHODS.resolve(method)
        self.task_key = TASKS.resolve(task)
        self.run_cfg = run if isinstance(run, RunConfig) else build_config(RunConfig, run or {}, "run")
        ENGINES.resolve(self.run_cfg.runner)
        self.method_cls: type[Method] = METHODS.get(self.method_key)
        task_cls: type[Task] = TASKS.get(self.task_key)
        self.task_cfg = build_config(task_cls.config_cls, task_config or {}, "task")
        self.task: Task = task_cls(self.task_cfg)
        mcfg = build_config(self.method_cls.config_cls, method_config or {}, "method")
        self.method_cfg = self.method_cls.resolve_config(mcfg, self.task.kind)
        if self.task.kind not in self.method_cls.task_kinds:
            raise UserError(f"method {self.method_key!r} does not support {self.task.kind} tasks like {self.task_key!r}")
        missing = [a for a in self.method_cls.needs_archs if a not in self.task.archs()]
        if missing:
            raise UserError(f"method {self.method_key!r} needs the architectures {', '.join(missing)}, which task "
                            f"{self.task_key!r} does not offer with this config (it has: {', '.join(self.task.archs())})")
        self.setting = parse_setting(self.run_cfg.setting)
        self.history = History()
        self.callbacks: list[Callback] = [self.history, DivergenceGuard(self.run_cfg.divergence_factor)]
        self.callbacks += list(callbacks or [])
        self.device = resolve_device(self.run_cfg.device)
        self.data = data  # a sweep may pass the task's data loaded once
        d, r = self.task.run_defaults, self.run_cfg
        self.clients = r.clients if r.clients is not None else d.get("clients", 10)
        self.local_split = r.local_split or ("8:1:1" if self.method_cls.evaluation == "local" else None)
        self.threads = resolve_threads(r.threads, self.task.tiny)
        self.train = TrainSettings(
            local_epochs=r.local_epochs, batch_size=r.batch_size or d.get("batch_size", 32),
            optimizer=r.optimizer or d.get("optimizer", "adamw"), lr=r.lr or d.get("lr", 1e-3),
            momentum=r.momentum, weight_decay=r.weight_decay, grad_clip=r.grad_clip, max_steps=r.max_steps,
        )
        self.tier_ranks = tier_ranks_for(r.tier_ranks, self.task.kind)  # None = the paper's, by task kind
        self.last_eval: EvalResult | None = None
        self.initial_eval: EvalResult | None = None
        self.state: MethodState | None = None  # the global state after the last finished round
        self.per_client: dict[int, float] | None = None  # local evaluation: each client's score
        self.elapsed_before = 0.0  # seconds spent before a resume (from the checkpoint)
        # set up by setup(); a run that fails before the end of it still writes its record
        # from what was set
        self.n_clients: int | None = None
        self.per_round: int | None = None
        self.part = None
        self.tiers: TierAssigner | None = None
        self.sizes: list[int] = []
        self.holdout_indices: list[int] = []
        self.proxy_indices: list[int] = []
        self.server: ServerTools | None = None
        self.method: Method | None = None
        self.worker: ClientWorker | None = None
        self.store: ClientStore | None = None
        self._t_start = time.perf_counter()

    # ------------------------------------------------------------------ identity
    def resolved_run(self) -> dict[str, Any]:
        """Every RunConfig field, defaults resolved (what the record and the run id hold)."""
        d = config_to_dict(self.run_cfg)
        d.update(clients=self.clients, batch_size=self.train.batch_size, optimizer=self.train.optimizer,
                 lr=self.train.lr, local_split=self.local_split, tier_ranks=self.tier_ranks)
        return d

    def run_id(self) -> str:
        return run_identity(self.method_key, config_to_dict(self.method_cfg), self.task_key,
                            config_to_dict(self.task_cfg), self.resolved_run())

    def record_path(self) -> Path:
        return records.record_path(self.run_cfg.out, {"run": {"task": self.task_key, "method": self.method_key,
                                                             "run_id": self.run_id()}})

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        r = self.run_cfg
        torch.set_num_threads(self.threads)
        np.random.seed(r.seed % 2**32)  # third-party code (timm, peft) may draw from these
        torch.manual_seed(r.seed)
        if self.data is None:
            self.data = self.task.load()
        n_domains = None if self.data.domain_names is None else len(self.data.domain_names)
        if self.setting.needs_domains and self.data.train_domains is None:
            raise UserError(f"setting {self.setting.raw!r} needs a task with domains; {self.task_key!r} has none")
        self.n_clients = n_clients_for(self.setting, self.clients, n_domains)
        if r.per_round is not None and r.per_round > self.n_clients:
            raise UserError(f"--per-round {r.per_round} > number of clients {self.n_clients}")
        self.per_round = min(self.n_clients, r.per_round or min(10, self.n_clients))
        self.part = partition(self.setting, self.data.train_labels, self.n_clients, r.seed,
                              domains=self.data.train_domains, n_classes=self.data.n_classes)
        self.local = split_local(self.part.client_indices, self.local_split, r.seed) if self.local_split else None
        self.train_indices = self.local.train if self.local else self.part.client_indices
        self.sizes = [int(len(ix)) for ix in self.train_indices]
        mc = self.method_cfg
        self.pool = ModelPool(self.task, self.data, (mc.lora_r, mc.lora_alpha, mc.lora_dropout, mc.lora_targets),
                              r.seed, self.device)
        self.am = self.pool.get()  # the default architecture: global model, server tools, evaluation
        self.tiers = TierAssigner(
            self.n_clients, self.am.bundle.n_layers, roc=r.roc, capacities=r.capacities, dynamic=r.dynamic,
            tier_fractions=list(r.tier_fractions), tier_ranks=self.tier_ranks, max_rank=mc.lora_r, seed=r.seed,
        )
        proxy = self._hold_out()
        self.server = ServerTools(self.am, self.task, proxy, self.device)
        self.ctx = MethodContext(
            n_layers=self.am.bundle.n_layers, layer_keys=self.am.layer_keys, head_keys=self.am.head_keys,
            profiles=self.tiers.static_profiles(self.sizes), lora_r=mc.lora_r, lora_alpha=mc.lora_alpha,
            task_kind=self.task.kind, server=self.server, block_bytes=self.am.block_bytes, rounds=r.rounds,
            init_head=self.task.init_head,
            n_classes=self.data.n_classes, data_info=dict(self.data.info),
            parts=self.am.bundle.parts, part_keys=self.am.part_keys,
        )
        self.method = self.method_cls(self.method_cfg, self.ctx)
        self.method.check_tiers(self.tiers.reachable_profiles(self.sizes))
        self.pool.set_method(self.method)
        self.ctx.extra_keys = list(self.am.extra_keys)
        self.worker = ClientWorker(self.pool, self.method, WorkerSpec(self.train, r.measure_flops))
        self.store = ClientStore(self.record_path().with_suffix(".clients"), int(r.store_memory_mb * 1e6))

    def _hold_out(self):
        """Take the server's examples out of the test split, for every method alike.

        ``run.server_holdout`` (default: the task's paper size, at most half the split) test
        examples, drawn with the run seed, are never evaluated, whether or not the method's
        server uses them, so every method on a task and seed is scored on the same examples.
        A method with a proxy set (FIM-HLA) uses the first ``proxy_size_for`` of them.
        Returns that proxy set, or None."""
        test = self.data.test
        n_test, given = len(test), self.run_cfg.server_holdout
        n_hold = min(self.task.server_holdout, n_test // 2) if given is None else given
        if n_hold >= n_test:
            raise UserError(f"run.server_holdout={n_hold} leaves nothing to evaluate (test split: {n_test})")
        need = self.method_cls.proxy_size_for(self.method_cfg, n_hold)
        if need > n_hold:
            raise UserError(f"{self.method_key} needs a proxy set of {need} examples but the server holds out "
                            f"{n_hold} (set run.server_holdout >= {need})")
        perm = rng_for(self.run_cfg.seed, "holdout").permutation(n_test)
        held, keep = np.sort(perm[:n_hold]), np.sort(perm[n_hold:])
        self.holdout_indices = held.tolist()
        self.proxy_indices = np.sort(perm[:need]).tolist()
        self.test = subset(test, keep) if n_hold else test
        self.test_domains = None if self.data.test_domains is None else self.data.test_domains[keep]
        return subset(test, np.asarray(self.proxy_indices, dtype=np.int64)) if need else None

    # ------------------------------------------------------------------ run
    def elapsed(self) -> float:
        """Wall seconds of this run, including those before a resume."""
        return self.elapsed_before + time.perf_counter() - self._t_start

    def run(self) -> tuple[dict, Path]:
        """Run (or resume from its checkpoint) and write the record."""
        self._t_start = time.perf_counter()
        status, error = "ok", None
        engine = None
        ckpt = checkpoint.checkpoint_path(self.record_path())
        try:
            with _sigterm_as_cancel():
                self.setup()
                engine = ENGINES.get(self.run_cfg.runner)(self)
                self.state = self.method.init_state(self.am.read(self.am.all_keys + self.method.base_weights_needed()))
                done = checkpoint.restore(ckpt, self)
                if done:
                    log.info("resuming %s from its checkpoint after round %d", self.run_id(), done)
                elif self.run_cfg.eval_initial:
                    self.initial_eval = self.evaluate(self.state, engine)
                if self.run_cfg.checkpoint_every:
                    self.callbacks.append(checkpoint.Checkpointer(ckpt, self.run_cfg.checkpoint_every))
                for cb in self.callbacks:
                    cb.on_run_start(self, self.run_cfg.rounds)
                engine.run(self.state, done + 1)
        except KeyboardInterrupt as e:
            status, error = "cancelled", "terminated (SIGTERM)" if isinstance(e, Cancelled) else "interrupted (Ctrl-C)"
        except (NonFiniteLoss, Diverged) as e:
            status, error = "failed", f"{e} in round {len(self.history.logs) + 1}"
        except torch.cuda.OutOfMemoryError as e:
            status, error = "failed", "CUDA out of memory: " + str(e).splitlines()[0]
        except UserError as e:
            if engine is None:  # bad input found while setting up: one line, exit 2, no record
                raise
            status, error = "failed", str(e)  # bad data found while training (e.g. an unreadable image)
        except Exception as e:  # noqa: BLE001 - any failure still leaves a record
            log.exception("run failed")
            status, error = "failed", f"{type(e).__name__}: {e}"
        finally:
            if engine is not None:
                engine.close()
            if self.store is not None:
                # the private state stays on disk for a resume unless the run ended ok
                done_ok = status == "ok" and not self.run_cfg.keep_checkpoints
                self.store.close() if done_ok else self.store.release()
        rec = self.record(status, error, self.elapsed())
        path = records.record_path(self.run_cfg.out, rec)
        records.write_record(rec, path)
        if status == "ok" and not self.run_cfg.keep_checkpoints:
            checkpoint.remove(ckpt)
        for cb in self.callbacks:
            cb.on_run_end(self, rec)
        return rec, path

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, state: MethodState, engine) -> EvalResult:
        """Global evaluation (the global model on the test split), or local evaluation
        (every client's model on its own local test split, mean over clients)."""
        if self.method.evaluation == "local":
            return self._evaluate_local(state, engine)
        m = self.method
        return evaluate_model(self.am, m, self.task, m.eval_tensors(state), self.test, self.test_domains,
                              self.data.domain_names, m.eval_blocks(state))

    def _evaluate_local(self, state: MethodState, engine) -> EvalResult:
        from fedbench.methods.base import ClientPlan

        tensors = self.method.eval_tensors(state)

        def jobs():  # one client's private state in memory at a time (it may be on disk)
            for c in range(self.n_clients):
                arch = self.method.client_arch(c)
                keys = self.method.private_keys(ClientPlan(c, 0, (), arch=arch))
                yield EvalJob(c, arch, tensors, self.store.get(c), self.local.test[c], keys)

        results = engine.evaluate_local(jobs())
        self.per_client = {c: r.value for c, r in enumerate(results)}
        vals = np.array(list(self.per_client.values()), dtype=np.float64)
        name = results[0].metric_name if results else self.task.metric_name
        extra = {"worst_client": float(vals.min())}
        for key in sorted({k for r in results for k in r.extra}):  # e.g. every named output of eval_logits
            got = [r.extra[key] for r in results if key in r.extra and np.isfinite(r.extra[key])]
            if got:
                extra[key] = float(np.mean(got))  # mean over clients, like the headline
        return EvalResult(name, float(vals.mean()), None, extra)

    # ------------------------------------------------------------------ record
    def record(self, status: str, error: str | None, seconds_total: float) -> dict:
        rec = records.empty_record()
        r = self.run_cfg
        commit, dirty = git_info()
        part, tiers, method = self.part, self.tiers, self.method
        logs, costs = self.history.logs, [c for _, c in self.history.costs]
        archs = {c: self.pool.arch(method.client_arch(c)) for c in range(self.n_clients)} if method is not None else {}
        rec["status"], rec["error"] = status, error
        rec["run"].update(
            run_id=self.run_id(), method=self.method_key, method_config=config_to_dict(self.method_cfg),
            task=self.task_key, task_config=config_to_dict(self.task_cfg), run_config=self.resolved_run(),
            setting=self.setting.raw, roc=r.roc, capacities=list(r.capacities) if r.capacities else None,
            dynamic=r.dynamic, n_clients=self.clients if self.n_clients is None else self.n_clients,
            clients_per_round=(r.per_round or 0) if self.per_round is None else self.per_round, rounds=r.rounds,
            rounds_completed=len(logs), local_epochs=r.local_epochs, batch_size=self.train.batch_size,
            optimizer=self.train.optimizer, lr=self.train.lr, seed=r.seed, device=str(self.device), runner=r.runner,
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            fedbench_version=fedbench.__version__, git_commit=commit, git_dirty=dirty,
            partition_fingerprint=part.fingerprint if part else None,
            client_tiers={str(c): int(t) for c, t in enumerate(tiers.assignment)} if tiers else {},
            tiers=tiers.describe() if tiers else [], tier_counts=tiers.counts() if tiers else {},
            resource_label=(r.roc or (",".join(map(str, r.capacities)) if r.capacities else "-"))
            + (" dyn" if r.dynamic else ""),
            holdout_indices=self.holdout_indices, proxy_indices=self.proxy_indices,
            client_sizes=self.sizes, client_archs={str(c): a for c, a in archs.items()},
            sampled_clients=[l.sampled for l in logs],
            method_layout=method.layout() if method is not None else {},
        )
        rec["results"].update(results_section(
            logs, self.last_eval, self.initial_eval, self.task.metric_name, self.method_cls.evaluation,
            self.per_client, archs))
        rec["results"]["target"] = target_section(r.target_metric, logs, self.history.costs)
        meter = self.worker.meter if self.worker is not None else None
        server = self.server
        rec["cost"].update(cost_section(costs, logs, self.device.type, server.flops if server else 0.0,
                                        server.seconds if server else 0.0, seconds_total,
                                        meter.measured if meter else 0, meter.reused if meter else 0))
        rec["env"] = env_info(self.device, self.threads)
        return rec


@contextlib.contextmanager
def _sigterm_as_cancel():
    """SIGTERM raises :class:`Cancelled` (in the main thread only; elsewhere unchanged)."""
    def handler(signum, frame):
        raise Cancelled()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


__all__ = ["Cancelled", "Experiment"]
