"""The local runner: clients one after another in one process, one backbone.

Per-client state is only the adapter/head tensors of the payloads; there is never a
per-client copy of the backbone. Methods see only their hooks (plan, client_payload,
local_loss, aggregate) and never this runner.

A run always ends with a result record: ``ok``, or ``failed`` (exception, NaN loss, CUDA
OOM) / ``cancelled`` (Ctrl-C) with the rounds it finished.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import math
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

import fedbench
from fedbench.config import build_config, config_to_dict
from fedbench.errors import UserError
from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate, Method, MethodContext, MethodState
from fedbench.runners import records
from fedbench.runners.adapters import AdapterModel, tensor_bytes
from fedbench.runners.config import RunConfig
from fedbench.runners.meters import ClientCost, Stopwatch
from fedbench.runners.server import ServerTools
from fedbench.runners.tiers import TierAssigner
from fedbench.runners.train import NonFiniteLoss, TrainSettings, train_client
from fedbench.tasks import TASKS
from fedbench.tasks.base import Task, TaskData
from fedbench.tasks.partition import n_clients_for, parse_setting, partition

log = logging.getLogger(__name__)

MB = 1e6
GB = 1e9


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise UserError(f"bad --device {spec!r}: use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {spec} asked for, but CUDA is not available on this machine")
    return dev


@dataclass
class RoundLog:
    round: int
    metric: float | None
    train_loss: float | None
    seconds: float  # round wall time without evaluation
    client_seconds: float  # sum of the clients' local training time


@dataclass
class Callbacks:
    """Hooks for the CLI (progress bar); the library itself never prints."""

    on_start: Callable[[int], None] = lambda rounds: None
    on_round: Callable[[RoundLog], None] = lambda log_: None


def git_info() -> tuple[str | None, bool | None]:
    root = Path(fedbench.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return None, None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5)
        return commit.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def env_info(device: torch.device) -> dict[str, Any]:
    def version(mod: str) -> str | None:
        try:
            return __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional packages
            return None

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"python": platform.python_version(), "torch": version("torch"), "transformers": version("transformers"),
            "peft": version("peft"), "timm": version("timm"), "gpu": gpu}


def run_identity(method: str, method_cfg: dict, task: str, task_cfg: dict, run_cfg: dict) -> str:
    """Hash of the resolved config + seed + code version (output location excluded)."""
    run_cfg = {k: v for k, v in run_cfg.items() if k not in ("out",)}
    if not run_cfg.get("eval_initial", True):
        del run_cfg["eval_initial"]  # evaluation-only flag: absent at its default, so turning it on is a new run
    blob = json.dumps({"method": method, "method_config": method_cfg, "task": task, "task_config": task_cfg,
                       "run": run_cfg, "version": fedbench.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class LocalRunner:
    def __init__(self, method: str, task: str, run: RunConfig | dict | None = None,
                 method_config: dict | None = None, task_config: dict | None = None,
                 callbacks: Callbacks | None = None):
        self.method_key = METHODS.resolve(method)
        self.task_key = TASKS.resolve(task)
        self.run_cfg = run if isinstance(run, RunConfig) else build_config(RunConfig, run or {}, "run")
        self.method_cls: type[Method] = METHODS.get(self.method_key)
        task_cls: type[Task] = TASKS.get(self.task_key)
        self.method_cfg = build_config(self.method_cls.config_cls, method_config or {}, "method")
        self.task_cfg = build_config(task_cls.config_cls, task_config or {}, "task")
        self.task: Task = task_cls(self.task_cfg, seed=self.run_cfg.seed)
        self.method_cfg = self.method_cls.resolve_config(self.method_cfg, self.task.kind)
        if self.task.kind not in self.method_cls.task_kinds:
            raise UserError(f"method {self.method_key!r} does not support {self.task.kind} tasks like {self.task_key!r}")
        self.setting = parse_setting(self.run_cfg.setting)
        self.callbacks = callbacks or Callbacks()
        self.logs: list[RoundLog] = []
        self.costs: list[tuple[int, ClientCost]] = []
        self.device = resolve_device(self.run_cfg.device)
        defaults = getattr(self.task, "run_defaults", {})
        r = self.run_cfg
        self.clients = r.clients if r.clients is not None else defaults.get("clients", 10)
        self.train = TrainSettings(
            local_epochs=r.local_epochs,
            batch_size=r.batch_size or defaults.get("batch_size", 32),
            optimizer=r.optimizer or defaults.get("optimizer", "adamw"),
            lr=r.lr or defaults.get("lr", 1e-3),
            momentum=r.momentum, weight_decay=r.weight_decay, grad_clip=r.grad_clip, max_steps=r.max_steps,
        )

    # ------------------------------------------------------------------ set-up
    def run_id(self) -> str:
        return run_identity(self.method_key, config_to_dict(self.method_cfg), self.task_key,
                            config_to_dict(self.task_cfg), self._resolved_run())

    def record_path(self) -> Path:
        return records.record_path(self.run_cfg.out, {"run": {"task": self.task_key, "method": self.method_key,
                                                             "run_id": self.run_id()}})

    def _resolved_run(self) -> dict[str, Any]:
        d = config_to_dict(self.run_cfg)
        d.update(clients=self.clients, batch_size=self.train.batch_size, optimizer=self.train.optimizer,
                 lr=self.train.lr)
        return d

    def setup(self) -> None:
        r = self.run_cfg
        torch.manual_seed(r.seed)
        np.random.seed(r.seed % 2**32)  # third-party code (timm, peft) may draw from these
        self.rng = np.random.default_rng(r.seed)
        self.data: TaskData = self.task.load()
        n_domains = None if self.data.domain_names is None else len(self.data.domain_names)
        if self.setting.needs_domains and self.data.train_domains is None:
            raise UserError(f"setting {self.setting.raw!r} needs a task with domains; {self.task_key!r} has none")
        self.n_clients = n_clients_for(self.setting, self.clients, n_domains)
        self.per_round = min(self.n_clients, r.per_round or min(10, self.n_clients))
        if r.per_round is not None and r.per_round > self.n_clients:
            raise UserError(f"--per-round {r.per_round} > number of clients {self.n_clients}")
        self.part = partition(self.setting, self.data.train_labels, self.n_clients, r.seed,
                              domains=self.data.train_domains, n_classes=self.data.n_classes)
        self.sizes = self.part.sizes()
        bundle = self.task.build_model(self.data)
        mc = self.method_cfg
        self.am = AdapterModel(bundle, mc.lora_r, mc.lora_alpha, mc.lora_dropout, mc.lora_targets, self.device)
        self.tiers = TierAssigner(
            self.n_clients, bundle.n_layers, roc=r.roc, capacities=r.capacities, dynamic=r.dynamic,
            tier_fractions=list(r.tier_fractions), tier_ranks=list(r.tier_ranks), max_rank=mc.lora_r, seed=r.seed,
        )
        proxy = self._hold_out()
        self.server = ServerTools(self.am, self.task, proxy, self.device)
        self.ctx = MethodContext(
            n_layers=bundle.n_layers, layer_keys=self.am.layer_keys, head_keys=self.am.head_keys,
            profiles=self.tiers.static_profiles(self.sizes), lora_r=mc.lora_r, lora_alpha=mc.lora_alpha,
            task_kind=self.task.kind, server=self.server, block_bytes=self.am.block_bytes, rounds=r.rounds,
        )
        self.method = self.method_cls(self.method_cfg, self.ctx)
        head = bundle.model.get_submodule(bundle.head_modules[-1]) if bundle.head_modules else None
        self.ctx.extra_keys = self.am.attach_extra(self.method.extra_modules(head))

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
        perm = np.random.default_rng([self.run_cfg.seed, 99]).permutation(n_test)
        held, keep = np.sort(perm[:n_hold]), np.sort(perm[n_hold:])
        self.holdout_indices: list[int] = held.tolist()
        self.proxy_indices: list[int] = np.sort(perm[:need]).tolist()
        self.test = _subset(test, keep) if n_hold else test
        self.test_domains = None if self.data.test_domains is None else self.data.test_domains[keep]
        return _subset(test, np.asarray(self.proxy_indices, dtype=np.int64)) if need else None

    # ------------------------------------------------------------------ loop
    def run(self) -> tuple[dict, Path]:
        rec = records.empty_record()
        t_start = time.perf_counter()
        status, error = "ok", None
        try:
            self.setup()
            state = self.method.init_state(self.am.read(self.am.all_keys))
            if self.run_cfg.eval_initial:
                self.initial_eval = self.evaluate(state)
            self.callbacks.on_start(self.run_cfg.rounds)
            for rnd in range(1, self.run_cfg.rounds + 1):
                state = self._round(rnd, state)
        except KeyboardInterrupt:
            status, error = "cancelled", "interrupted (Ctrl-C)"
        except NonFiniteLoss as e:
            status, error = "failed", f"{e} in round {len(self.logs) + 1}"
        except torch.cuda.OutOfMemoryError as e:
            status, error = "failed", "CUDA out of memory: " + str(e).splitlines()[0]
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure still leaves a record
            log.exception("run failed")
            status, error = "failed", f"{type(e).__name__}: {e}"
        rec = self._record(status, error, time.perf_counter() - t_start)
        path = records.record_path(self.run_cfg.out, rec)
        records.write_record(rec, path)
        return rec, path

    def _round(self, rnd: int, state: MethodState) -> MethodState:
        r = self.run_cfg
        with Stopwatch(self.device) as sw:
            sampled = sorted(self.rng.choice(self.n_clients, size=self.per_round, replace=False).tolist())
            profiles = self.tiers.profiles(sampled, rnd, self.rng, self.sizes)
            plans = self.method.plan(rnd, profiles, state, self.rng)
            updates: list[ClientUpdate] = []
            client_seconds = 0.0
            losses = []
            for p in profiles:
                plan = plans[p.client]
                if plan.skip:
                    self.costs.append((rnd, ClientCost(client=p.client, tier=p.tier)))
                    continue
                payload = self.method.client_payload(state, plan)
                self._check_payload(plan, payload)
                up_keys = self.method.upload_keys(plan)
                tensors, cost = train_client(
                    self.am, self.task, self.method, self.data.train, self.part.client_indices[p.client], plan,
                    payload, up_keys, self.train, self.rng, measure=r.measure_flops,
                )
                cost.down_bytes = tensor_bytes(payload) + self.method.extra_down_bytes(plan)
                cost.up_bytes = tensor_bytes(tensors)
                client_seconds += cost.seconds
                self.costs.append((rnd, cost))
                if cost.train_loss is not None:
                    losses.append(cost.train_loss)
                updates.append(ClientUpdate(p.client, tensors, self.sizes[p.client], plan, cost.train_loss))
            state = self.method.aggregate(state, updates)
        metric = None
        if rnd % r.eval_every == 0 or rnd == r.rounds:
            self.last_eval = self.evaluate(state)
            metric = self.last_eval.value
        entry = RoundLog(rnd, metric, float(np.mean(losses)) if losses else None, sw.seconds, client_seconds)
        self.logs.append(entry)
        self.callbacks.on_round(entry)
        return state

    def _check_payload(self, plan, payload) -> None:
        """No hidden channel: the client's forward may only use tensors it was sent."""
        if plan.rank is not None and plan.rank != self.am.r:
            return  # rank methods send their own shapes; the adapter is loaded whole
        blocks = range(self.ctx.n_layers) if plan.blocks is None else plan.blocks
        need = set(self.ctx.keys_for_layers(blocks, head=True))
        missing = need - set(payload)
        if missing:
            raise RuntimeError(f"payload for client {plan.client} lacks {len(missing)} tensors its model uses, "
                               f"e.g. {sorted(missing)[0]}")

    def evaluate(self, state: MethodState):
        """The global model on the test split. Base weights among the method's eval tensors
        (FLoRA's merged weights) apply to this evaluation only; a method that overrides
        ``eval_logits`` (several heads) is evaluated through it."""
        tensors = getattr(self.method, "eval_tensors", lambda s: s.tensors)(state)
        m = self.method
        with self.am.base_overlay(tensors), self.am.subset_blocks(m.eval_blocks(state)), \
                self.am.capture(m.hidden_blocks(None)) as hidden:
            self.am.load(tensors)
            self.am.model.eval()
            kw = {}
            if type(m).eval_logits is not Method.eval_logits:
                kw["logits_fn"] = lambda model, batch: m.eval_logits(self.task, model, batch, hidden)
            return self.task.evaluate(self.am.model, self.test, self.device, self.test_domains,
                                      self.data.domain_names, **kw)

    # ------------------------------------------------------------------ record
    def _record(self, status: str, error: str | None, seconds_total: float) -> dict:
        rec = records.empty_record()
        r = self.run_cfg
        run_dict = self._resolved_run()
        mcfg = config_to_dict(self.method_cfg)
        tcfg = config_to_dict(self.task_cfg)
        commit, dirty = git_info()
        part = getattr(self, "part", None)
        tiers = getattr(self, "tiers", None)
        rec["status"], rec["error"] = status, error
        rec["run"].update(
            run_id=self.run_id(),
            method=self.method_key, method_config=mcfg, task=self.task_key, task_config=tcfg,
            setting=self.setting.raw, roc=r.roc, capacities=list(r.capacities) if r.capacities else None,
            dynamic=r.dynamic, n_clients=getattr(self, "n_clients", self.clients),
            clients_per_round=getattr(self, "per_round", r.per_round or 0), rounds=r.rounds,
            rounds_completed=len(self.logs), local_epochs=r.local_epochs, batch_size=self.train.batch_size,
            optimizer=self.train.optimizer, lr=self.train.lr, seed=r.seed, device=str(self.device), runner=r.runner,
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            fedbench_version=fedbench.__version__, git_commit=commit, git_dirty=dirty,
            partition_fingerprint=part.fingerprint if part else None,
            client_tiers={str(c): int(t) for c, t in enumerate(tiers.assignment)} if tiers else {},
            tiers=tiers.describe() if tiers else [],
            resource_label=r.roc or (",".join(map(str, r.capacities)) if r.capacities else "-"),
        )
        if r.dynamic:
            rec["run"]["resource_label"] += " dyn"
        rec["run"]["holdout_indices"] = getattr(self, "holdout_indices", [])  # never evaluated, all methods
        rec["run"]["proxy_indices"] = getattr(self, "proxy_indices", [])  # the subset the server used
        rec["run"]["client_sizes"] = getattr(self, "sizes", [])
        rec["results"].update(self._results())
        rec["cost"].update(self._costs(seconds_total))
        rec["env"] = env_info(self.device)
        return rec

    def _results(self) -> dict:
        curve = [{"round": l.round, "metric": l.metric, "train_loss": l.train_loss} for l in self.logs]
        evals = [(l.metric, l.round) for l in self.logs if l.metric is not None and math.isfinite(l.metric)]
        last = getattr(self, "last_eval", None)
        best = max(evals) if evals else (None, None)
        return {
            "metric_name": last.metric_name if last else getattr(self.task, "metric_name", "top1"),
            "final": last.value if last else None, "best": best[0], "best_round": best[1],
            "per_domain": last.per_domain if last else None, "extra": dict(last.extra) if last else {},
            "curve": curve, "initial": self._initial(),
        }

    def _initial(self) -> dict | None:
        """Evaluation before round 1 (``run.eval_initial``): the un-tuned baseline."""
        init = getattr(self, "initial_eval", None)
        if init is None:
            return None
        return {"metric": init.value, "per_domain": init.per_domain, "extra": dict(init.extra)}

    def _costs(self, seconds_total: float) -> dict:
        trained = [c for _, c in self.costs if c.steps > 0]
        all_sampled = [c for _, c in self.costs]
        mem_source = "cuda" if self.device.type == "cuda" else "accounted"

        def mean(xs):
            xs = list(xs)
            return float(np.mean(xs)) if xs else None

        def by_tier(items, fn):
            tiers = sorted({c.tier for c in items})
            return {str(t): fn([c for c in items if c.tier == t]) for t in tiers}

        step_t = lambda cs: {"mean": mean((c.flops_forward_step + c.flops_backward_step) / 1e12 for c in cs),
                             "forward": mean(c.flops_forward_step / 1e12 for c in cs),
                             "backward": mean(c.flops_backward_step / 1e12 for c in cs)}
        peak = (lambda c: c.cuda_peak_bytes) if mem_source == "cuda" else (lambda c: c.accounted_bytes)
        mem = lambda cs, f: {"mean": mean(f(c) / GB for c in cs), "max": max((f(c) / GB for c in cs), default=None)}
        traffic = lambda cs: {"down": mean(c.down_bytes / MB for c in cs), "up": mean(c.up_bytes / MB for c in cs),
                              "total": mean((c.down_bytes + c.up_bytes) / MB for c in cs)}
        measured = [c for c in trained if c.flops_forward_step > 0]
        steps = sum(c.steps for c in trained)
        client_seconds = sum(c.seconds for c in trained)
        return {
            "tflops_per_step": {
                "mean": step_t(measured)["mean"], "forward_mean": step_t(measured)["forward"],
                "backward_mean": step_t(measured)["backward"], "by_tier": by_tier(measured, step_t),
            },
            "tflops_total": sum(c.flops_total for c in trained) / 1e12 if measured else None,
            "server_tflops_total": self.server.flops / 1e12 if hasattr(self, "server") else 0.0,
            "flops_source": "FlopCounterMode on the first step of each client-round, scaled by batch size over its steps",
            "peak_mem_gb": {**mem(measured, peak), "by_tier": by_tier(measured, lambda cs: mem(cs, peak))},
            "peak_mem_source": mem_source,
            "accounted_mem_gb": {**mem(measured, lambda c: c.accounted_bytes),
                                 "by_tier": by_tier(measured, lambda cs: mem(cs, lambda c: c.accounted_bytes))},
            "traffic_mb_per_client_round": {**traffic(all_sampled), "by_tier": by_tier(all_sampled, traffic)},
            "traffic_mb_total": sum(c.down_bytes + c.up_bytes for c in all_sampled) / MB,
            "seconds_per_round": mean(l.seconds for l in self.logs),
            "seconds_total": seconds_total,
            "seconds_per_client_step": client_seconds / steps if steps else None,
            "server_seconds_total": self.server.seconds if hasattr(self, "server") else 0.0,
            "client_seconds_total": client_seconds,
            "round_seconds_total": sum(l.seconds for l in self.logs),
        }


def _subset(dataset, idx: np.ndarray):
    if hasattr(dataset, "subset"):
        return dataset.subset(idx)
    return torch.utils.data.Subset(dataset, [int(i) for i in idx])
