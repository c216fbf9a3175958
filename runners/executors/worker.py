"""ClientWorker: one client's round, trained through the one client step (:mod:`~fedbench.runners.executors.step`).

A worker holds a :class:`ModelPool` (one model per task architecture, never one per
client) and no client state: it receives a :class:`ClientJob` (the plan, the payload, the
client's private state and its example indices), loads them into the model of the
client's architecture, trains with the meters and returns a :class:`ClientResult` (the
upload, the private state to keep, the cost). Engines run workers in-process (``local``)
or in other processes (``ray``); a worker built from the same :class:`WorkerSpec` gives
the same result anywhere, because every random draw of a job comes from the job's seed.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
import torch

from fedbench.errors import UserError
from fedbench.methods.base import ClientPlan, ClientProfile, MemoryAPI, Method, ServerAPI
from fedbench.runners.executors.adapters import AdapterModel, method_context
from fedbench.runners.cost.meters import ClientCost, PeakRSS
from fedbench.runners.executors.precision import autocast
from fedbench.runners.core.seeds import seed_for
from fedbench.runners.core.spec import TrainSettings
from fedbench.runners.executors.selection import ClientTools, select_plan
from fedbench.runners.executors.train import MeterCache, StepHook, adapter_for, train_client
from fedbench.tasks.base import EvalResult, Task, TaskData, subset

if TYPE_CHECKING:
    from fedbench.runners.core.spec import LoraSettings, RunSpec


@dataclass
class ClientJob:
    round: int
    plan: ClientPlan
    payload: dict[str, torch.Tensor]
    private: dict[str, torch.Tensor] | None  # None: the client has no state yet (fresh from its architecture)
    indices: np.ndarray  # its training examples
    seed: int  # every random draw of the job (batch order, dropout, new adapters)


@dataclass
class ClientResult:
    client: int
    upload: dict[str, torch.Tensor]
    private: dict[str, torch.Tensor]
    cost: ClientCost
    plan: ClientPlan  # the plan it trained: the job's, as ``Method.client_select`` chose it on the client


@dataclass
class EvalJob:
    """Local evaluation of one client's model: the global tensors + its private state."""

    client: int
    arch: str | None
    tensors: dict[str, torch.Tensor]
    private: dict[str, torch.Tensor] | None
    indices: np.ndarray  # its local test examples (indices into the train split)
    private_keys: list[str]


class ModelPool:
    """One :class:`AdapterModel` per architecture, built on first use.

    Each architecture is built under its own seed derived from the run seed, so every
    process builds identical models; the method's extra modules are attached likewise.
    """

    def __init__(self, task: Task, data: TaskData, lora: LoraSettings, seed: int, device: torch.device):
        self.task, self.data, self.lora, self.seed, self.device = task, data, lora, seed, device
        #: ``extras(head)``: the method's extra modules (``Method.extra_modules``), attached
        #: to every model the pool builds; set by the builder before the method exists
        self.extras: Callable[[torch.nn.Module | None], dict] | None = None
        #: ``patch(model)``: the method's ``Method.patch_model``, after the extra modules
        self.patch: Callable[[torch.nn.Module], None] | None = None
        self._models: dict[str, AdapterModel] = {}
        self._fresh: dict[tuple[str, str], torch.Tensor] = {}

    @property
    def default_arch(self) -> str:
        return self.task.archs()[0]

    def arch(self, arch: str | None) -> str:
        arch = arch or self.default_arch
        if arch not in self.task.archs():
            raise UserError(f"unknown architecture {arch!r} (the task has: {', '.join(self.task.archs())})")
        return arch

    def set_extras(self, extras: Callable[[torch.nn.Module | None], dict],
                   patch: Callable[[torch.nn.Module], None] | None = None) -> None:
        self.extras, self.patch = extras, patch
        for arch, am in self._models.items():
            self._attach(arch, am)

    def get(self, arch: str | None = None) -> AdapterModel:
        arch = self.arch(arch)
        if arch not in self._models:
            self._models[arch] = self._build(arch)
        return self._models[arch]

    def _build(self, arch: str) -> AdapterModel:
        lora = self.lora
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(self.seed, "model", arch))
            bundle = self.task.build_model(self.data, None if arch == self.default_arch else arch)
            am = AdapterModel(bundle, lora.r, lora.alpha, lora.dropout, lora.targets, self.device)
        if self.extras is not None:
            self._attach(arch, am)
        return am

    def _attach(self, arch: str, am: AdapterModel) -> None:
        bundle = am.bundle
        head = bundle.model.get_submodule(bundle.head_modules[-1]) if bundle.head_modules else None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(self.seed, "extra", arch))
            am.attach_extra(self.extras(head))
            if self.patch is not None:
                self.patch(am.model)

    def fresh(self, arch: str | None, keys: list[str]) -> dict[str, torch.Tensor]:
        """The initial values of ``keys`` in a newly built model of ``arch`` (a client's
        private state before its first round); cached per architecture and key."""
        arch = self.arch(arch)
        missing = [k for k in keys if (arch, k) not in self._fresh]
        if missing:
            am = self._build(arch)
            for k, t in am.read(missing).items():
                self._fresh[(arch, k)] = t.cpu()
            del am
        return {k: self._fresh[(arch, k)] for k in keys}


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker is built from besides the data and the tier profiles:
    picklable, so the Ray actors build exactly what the driver builds (:meth:`build`)."""

    spec: RunSpec
    device: str  # "cpu", "cuda", "cuda:1"
    threads: int
    #: the registered classes, carried as classes: one registered only in the driver (a
    #: test's) still reaches a worker process
    method_cls: type
    task_cls: type

    @classmethod
    def of(cls, spec: "RunSpec", device: str, threads: int) -> "WorkerSpec":
        return cls(spec, device, threads, spec.method_cls, spec.task_cls)

    def build(self, data: TaskData, profiles: Mapping[int, ClientProfile], server: ServerAPI | None = None,
              pool: ModelPool | None = None, memory: MemoryAPI | None = None) -> "ClientWorker":
        """The model pool, the method (its context complete) and the worker, for ``data``
        and the clients' static tier ``profiles``. ``server``: the driver's server tools
        and ``memory`` its memory accountant (None in a worker process); ``pool``: a pool
        already built from this spec (the driver builds it first, to size the tiers by the
        model's depth)."""
        spec = self.spec
        torch.set_num_threads(self.threads)
        if pool is None:
            pool = ModelPool(self.task_cls(spec.task_config), data, spec.lora, spec.run.seed, torch.device(self.device))
        am = pool.get()  # the default architecture: global model, server tools, evaluation
        ctx = method_context(am, profiles, spec.run.rounds, pool.task, data.n_classes, data.info, server, memory,
                             archs=pool.task.archs(), build_model=functools.partial(pool.task.build_model, data))
        cls, cfg = self.method_cls, spec.method_config
        pool.set_extras(lambda head: cls.extra_modules(cfg, ctx, head), lambda model: cls.patch_model(cfg, model))
        method = cls(cfg, dataclasses.replace(ctx, extra_keys=list(am.extra_keys)))  # a complete context
        return ClientWorker(pool, method, spec.train, spec.run.measure_flops)


class ClientWorker:
    def __init__(self, pool: ModelPool, method: Method, settings: TrainSettings, measure: bool):
        self.pool, self.method, self.settings = pool, method, settings
        self.meter = MeterCache() if measure else None
        self.rss = PeakRSS()

    def run(self, job: ClientJob, on_step: StepHook | None = None) -> ClientResult:
        """Select (``Method.client_select``) and train ``job``'s client; ``on_step(step, steps)``
        hears of each local step (progress)."""
        return self.train(*self.select(job), on_step=on_step)

    def select(self, job: ClientJob) -> tuple[ClientJob, float]:
        """``job`` with the plan its client trains (chosen on the client from its own data by
        ``Method.client_select``; the job's plan by default) and the FLOPs that choice took."""
        arch, tensors = self.job_tensors(job)
        am = self.pool.get(arch)
        tools = ClientTools(am, self.pool.task, self.pool.data.train, job.indices, job.plan, tensors,
                            adapter_for(am, job.plan), self.settings.batch_size, self.settings.precision,
                            seed_for(job.seed, "select"), self.meter)
        with torch.random.fork_rng(devices=[am.device] if am.device.type == "cuda" else []):
            plan = select_plan(self.method, job.plan, tools)
        return dataclasses.replace(job, plan=plan), tools.flops

    def train(self, job: ClientJob, select_flops: float = 0.0, on_step: StepHook | None = None) -> ClientResult:
        """Train ``job``'s client on its plan as it stands (:meth:`select` done);
        ``select_flops`` are added to its training FLOPs."""
        plan, method = job.plan, self.method
        arch, tensors = self.job_tensors(job)
        am = self.pool.get(arch)
        reset = self.rss.reset()
        with torch.random.fork_rng(devices=[am.device] if am.device.type == "cuda" else []):
            torch.manual_seed(job.seed)
            upload, priv, cost = train_client(am, self.pool.task, method, self.pool.data.train, job.indices, plan,
                                              tensors, self.settings, np.random.default_rng(job.seed),
                                              self.meter, arch, on_step)
        cost.rss_peak_bytes = self.rss.read() if reset else None
        cost.flops_total += select_flops
        return ClientResult(plan.client, upload, priv, cost, plan)

    def job_tensors(self, job: ClientJob) -> tuple[str, dict[str, torch.Tensor]]:
        """``job``'s architecture and the tensors its model starts from: its payload and
        its private state (fresh from the architecture before its first round)."""
        plan, method = job.plan, self.method
        arch = self.pool.arch(plan.arch)
        private = job.private
        if private is None:
            private = self.pool.fresh(arch, method.private_keys(plan))
        tensors = {**job.payload, **private}
        missing = sorted(set(method.model_keys(plan)) - set(tensors))
        if missing:  # no hidden channel: the client's model may only use what it was sent or keeps
            raise RuntimeError(f"client {plan.client}'s model uses {len(missing)} tensors it was neither sent nor "
                               f"keeps, e.g. {missing[0]}")
        return arch, tensors

    def evaluate(self, job: EvalJob) -> EvalResult:
        """Local evaluation: the model of ``job.arch`` with the global tensors and the
        client's private state on its local test split (``job.indices`` of the train data)."""
        private = job.private if job.private is not None else self.pool.fresh(job.arch, job.private_keys)
        data = subset(self.pool.data.train, job.indices)
        return evaluate_model(self.pool.get(job.arch), self.method, self.pool.task, {**job.tensors, **private}, data,
                              precision=self.settings.precision)


@torch.no_grad()
def evaluate_model(am: AdapterModel, method: Method, task: Task, tensors: dict[str, torch.Tensor], data: Any,
                   domains=None, domain_names=None, blocks: tuple[int, ...] | None = None,
                   precision: str = "fp32") -> EvalResult:
    """``task.evaluate`` of ``am``'s model with ``tensors`` loaded (base weights among them
    apply to this evaluation only), on ``blocks`` (None = all), through the method's
    ``eval_logits`` (classification; None = the task's forward), in ``precision``. The
    scoring runs under ``torch.inference_mode`` (no autograd bookkeeping at all); loading
    the tensors does not, so the model's parameters never become inference tensors."""
    tensors = {k: v for k, v in tensors.items() if am.has(k)}
    with am.base_overlay(tensors), am.subset_blocks(blocks), am.capture(method.hidden_blocks(None)) as hidden:
        am.load(tensors)
        am.model.eval()
        with torch.inference_mode(), autocast(am.device, precision):
            return task.evaluate(am.model, data, am.device, domains, domain_names,
                                 logits_fn=lambda model, batch: method.eval_logits(task, model, batch, hidden))


__all__ = ["ClientJob", "ClientResult", "ClientWorker", "EvalJob", "ModelPool", "WorkerSpec", "evaluate_model"]
