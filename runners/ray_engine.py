"""The ``ray`` engine: a run's clients in a pool of ``run.workers`` Ray actors.

Each actor builds, once, what the in-process engine has in ``Experiment.setup``: the
task, a :class:`~fedbench.runners.worker.ModelPool`, the method and a
:class:`~fedbench.runners.worker.ClientWorker`, from picklable pieces (:class:`ActorSpec`:
task key + config, the method class + config + its :class:`MethodContext` without the
server, the LoRA settings, the run seed, the :class:`WorkerSpec`, the device, its torch
threads) and the task's data (sent once through the object store with ``ray.put``, or
loaded by the actor where they do not pickle). It holds no client state: the driver
sends each :class:`ClientJob` (plan, payload, private state, indices, seed) and gets
back the :class:`ClientResult` (upload, private state, cost, metered in the actor).
Jobs go round-robin to the actors; results come back in job order. As every random draw
of a job comes from the job's seed and every model from the run seed, a run gives the
same record as with ``--runner local`` (metrics and every cost figure but time; the
meter's own counters, ``meter_measurements`` / ``meter_reused``, are summed over the
actors, each of which measures a model shape once).

Ray is optional (``pip install 'fedbench-peft[ray]'``); this module imports it only when
the engine is built.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from fedbench.errors import UserError
from fedbench.methods.base import MethodContext
from fedbench.runners.engine import ENGINES, Engine
from fedbench.runners.worker import ClientJob, ClientResult, ClientWorker, EvalJob, ModelPool, WorkerSpec

RAY_VERSIONS = ">=2.40,<3"


def require_ray():
    """The ``ray`` module, or a one-line :class:`UserError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError("the ray runner and parallel sweeps need Ray: pip install 'fedbench-peft[ray]' "
                        f"(ray{RAY_VERSIONS})") from None
    return ray


def runtime_env() -> dict | None:
    """Where fedbench comes from a source checkout that is not the driver's working
    directory (which Ray puts on its workers' path anyway), the workers get it on
    ``PYTHONPATH`` so they import the same code as the driver."""
    import fedbench

    root = os.path.dirname(os.path.dirname(os.path.abspath(fedbench.__file__)))
    if not os.path.isfile(os.path.join(root, "pyproject.toml")) or os.path.abspath(os.getcwd()) == root:
        return None
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def init_ray(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None) -> bool:
    """Connect to Ray: the running instance of this process, the cluster at ``address``
    (or ``$RAY_ADDRESS``), or a new local instance with ``num_cpus`` / ``num_gpus``.
    Returns whether this call started (and so should shut down) the connection."""
    import logging

    ray = require_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kw: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    if address:
        ray.init(address=address, **kw)
    else:
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, **kw)
    return True


@dataclass
class ActorSpec:
    """Everything a client actor builds its worker from (picklable)."""

    task_key: str
    task_cfg: Any
    method_cls: type  # the class itself: a method registered only in the driver (tests) still travels
    method_cfg: Any
    ctx: MethodContext  # without ``server`` (a driver-side tool no client uses)
    lora: tuple[int, float, float, str]
    seed: int
    worker: WorkerSpec
    device: str  # "cpu" or "cuda" (Ray hands the actor its GPU through CUDA_VISIBLE_DEVICES)
    threads: int


def actor_spec(exp, threads: int) -> ActorSpec:
    """The :class:`ActorSpec` of a set-up :class:`~fedbench.runners.experiment.Experiment`."""
    mc = exp.method_cfg
    return ActorSpec(task_key=exp.task_key, task_cfg=exp.task_cfg, method_cls=exp.method_cls, method_cfg=mc,
                     ctx=dataclasses.replace(exp.ctx, server=None),
                     lora=(mc.lora_r, mc.lora_alpha, mc.lora_dropout, mc.lora_targets), seed=exp.run_cfg.seed,
                     worker=exp.worker.spec, device="cuda" if exp.device.type == "cuda" else "cpu", threads=threads)


class ClientActor:
    """One Ray actor: a model pool, the method and a worker, built once; no client state."""

    def __init__(self, spec: ActorSpec, data: Any = None):
        from fedbench.runners.environment import resolve_device
        from fedbench.tasks import TASKS

        torch.set_num_threads(spec.threads)
        task = TASKS.get(spec.task_key)(spec.task_cfg)
        if data is None:
            data = task.load()
        pool = ModelPool(task, data, spec.lora, spec.seed, resolve_device(spec.device))
        extra_keys = list(spec.ctx.extra_keys)
        ctx = dataclasses.replace(spec.ctx, server=None, extra_keys=[])  # as the driver's method saw it at init
        method = spec.method_cls(spec.method_cfg, ctx)
        pool.set_method(method)
        ctx.extra_keys = extra_keys
        self.worker = ClientWorker(pool, method, spec.worker)
        # the default architecture now, as Experiment.setup builds it in the driver: built
        # on the first job, it held up round 1 (measured: 8.8 s against 5.1 s for the
        # later rounds of a 10-client tiny_text round on 2 actors)
        pool.get()

    def ready(self) -> int:
        return os.getpid()

    def run(self, job: ClientJob) -> ClientResult:
        return self.worker.run(job)

    def evaluate(self, job: EvalJob, tensors: dict[str, torch.Tensor]):
        return self.worker.evaluate(dataclasses.replace(job, tensors=tensors))

    def meter_counts(self) -> tuple[int, int]:
        m = self.worker.meter
        return (m.measured, m.reused) if m is not None else (0, 0)


def _put_data(ray, data):
    """The task data in the object store once for every actor; None where they do not
    pickle (each actor then loads the task itself)."""
    try:
        return ray.put(data)
    except Exception:  # noqa: BLE001 - unpicklable datasets: the actors load them
        return None


@ENGINES.register("ray", "clients in a pool of run.workers Ray actors (one model pool each), results in job order")
class RayEngine(Engine):
    def __init__(self, exp):
        super().__init__(exp)
        ray = require_ray()
        self.ray = ray
        r = exp.run_cfg
        n = r.workers
        cuda = exp.device.type == "cuda"
        threads = r.threads or 1
        self._started = init_ray(num_cpus=max(os.cpu_count() or 1, n * threads),
                                 num_gpus=torch.cuda.device_count() if cuda else None)
        self.actors: list = []
        try:
            gpus = ray.cluster_resources().get("GPU", 0) if cuda else 0
            spec = actor_spec(exp, threads)
            opts: dict[str, Any] = dict(num_cpus=threads, num_gpus=min(1.0, gpus / n) if cuda else 0)
            env = runtime_env()
            if env:
                opts["runtime_env"] = env
            data = _put_data(ray, exp.data)
            actor_cls = ray.remote(ClientActor)
            self.actors = [actor_cls.options(**opts).remote(spec, data) for _ in range(n)]
            self._get([a.ready.remote() for a in self.actors])
        except BaseException:
            self.close()
            raise

    def _get(self, refs):
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def execute(self, jobs: Sequence[ClientJob]) -> list[ClientResult]:
        n = len(self.actors)
        return self._get([self.actors[i % n].run.remote(job) for i, job in enumerate(jobs)])

    def evaluate_local(self, jobs: Sequence[EvalJob]):
        n = len(self.actors)
        shared: dict[int, Any] = {}  # the same global tensors go to the object store once
        refs = []
        for i, job in enumerate(jobs):
            ref = shared.get(id(job.tensors))
            if ref is None:
                ref = shared[id(job.tensors)] = self.ray.put(job.tensors)
            refs.append(self.actors[i % n].evaluate.remote(dataclasses.replace(job, tensors={}), ref))
        return self._get(refs)

    def close(self) -> None:
        ray, actors = self.ray, self.actors
        self.actors = []
        if actors:
            meter = self.exp.worker.meter
            try:  # the meters live in the actors: their counters go into the record
                counts = ray.get([a.meter_counts.remote() for a in actors], timeout=60)
                if meter is not None:
                    meter.measured += sum(c[0] for c in counts)
                    meter.reused += sum(c[1] for c in counts)
            except Exception:  # noqa: BLE001 - a dead actor: the record still gets written
                pass
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001
                    pass
        if self._started and ray.is_initialized():
            ray.shutdown()
            self._started = False


__all__ = ["ActorSpec", "ClientActor", "RayEngine", "RAY_VERSIONS", "actor_spec", "init_ray", "require_ray",
           "runtime_env"]
