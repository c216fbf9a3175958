"""The ``ray`` executor: a round's client jobs in a pool of ``run.workers`` Ray actors.

Each actor builds its worker once with the same builder as the driver
(:meth:`~fedbench.runners.executors.worker.WorkerSpec.build`: model pool, method with a complete
context, worker) from the picklable :class:`~fedbench.runners.executors.worker.WorkerSpec`, the
clients' tier profiles and the task's data (sent once through the object store with
``ray.put``, or loaded by the actor where they do not pickle). It holds no client state:
the driver sends each :class:`ClientJob` (plan, payload, private state, indices, seed) and
gets back the :class:`ClientResult` (upload, private state, cost, metered in the actor).
Jobs go round-robin to the actors; results come back in job order. As every random draw
of a job comes from the job's seed and every model from the run seed, a run gives the
same record as with ``--executor local`` (metrics and every cost figure but time; the
meter's own counters, ``meter_measurements`` / ``meter_reused``, are summed over the
actors, each of which measures a model shape once).

Ray is optional (``pip install 'fedbench-peft[ray]'``); this module imports it only when
the executor is built.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import torch

from fedbench.errors import UserError
from fedbench.runners.executors.executor import EXECUTORS, Executor
from fedbench.runners.executors.worker import ClientJob, ClientResult, EvalJob, WorkerSpec

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
    from fedbench import version

    root = os.path.dirname(os.path.dirname(os.path.abspath(version.__file__)))
    if not os.path.isfile(os.path.join(root, "pyproject.toml")) or os.path.abspath(os.getcwd()) == root:
        return None
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


#: how long ``--address`` (or ``$RAY_ADDRESS``) may take to answer before the sweep gives up
CONNECT_TIMEOUT_S = 10.0
#: an HTTP/2 client's opening (preface and an empty SETTINGS frame): a gRPC server, as Ray's
#: GCS is, answers with a SETTINGS frame (frame type 4, the fourth byte of its header)
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _host_port(address: str) -> tuple[str, int]:
    if address == "auto":  # the cluster `ray start` last started on this machine
        from ray._private.services import canonicalize_bootstrap_address_or_die

        try:
            address = canonicalize_bootstrap_address_or_die(address)
        except ConnectionError:
            raise UserError("--address auto: no running Ray cluster found on this machine "
                            "(start one with `ray start --head`, or give HOST:PORT)") from None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379) or auto")
    return host.strip("[]"), int(port)


def _is_ray_gcs(address: str, timeout: float) -> str | None:
    """None where ``address`` answers Ray's own GCS client (a key read) within ``timeout``,
    else why not. Only asked of a server that already speaks HTTP/2 (the client itself waits
    40 s for one that does not). A Ray without this client skips the check."""
    try:
        from ray._raylet import GcsClient

        GcsClient(address=address).internal_kv_get(b"fedbench-probe", b"fedbench", timeout=max(0.1, timeout))
    except (ImportError, AttributeError, TypeError):
        return None
    except Exception as e:  # noqa: BLE001 - ray.exceptions.RpcError, GetTimeoutError, ...
        return f"it answers, but not as a Ray cluster ({(str(e).splitlines() or [type(e).__name__])[0]})"
    return None


def check_address(address: str, timeout: float | None = None) -> None:
    """A one-line :class:`UserError` unless the Ray cluster at ``address`` accepts a
    connection and answers within ``timeout`` seconds (:data:`CONNECT_TIMEOUT_S`), where Ray itself would retry for
    minutes printing only warnings: a TCP connection, an HTTP/2 reply (Ray's GCS is a gRPC
    server) and a key read by Ray's own GCS client. With ``RAY_USE_TLS`` set only the
    connection is checked; a ``ray://`` (Ray Client) address gets no key read."""
    import socket
    import time

    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    host, port = _host_port(address)
    deadline = time.monotonic() + timeout
    why = None
    tls = os.environ.get("RAY_USE_TLS", "0").lower() not in ("0", "", "false")
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if not tls:
                sock.sendall(_H2_HELLO)
                got = b""
                while len(got) < 9:
                    sock.settimeout(max(0.01, deadline - time.monotonic()))
                    chunk = sock.recv(9 - len(got))
                    if not chunk:
                        break
                    got += chunk
                if len(got) < 9 or got[3] != 4:
                    why = "it answers, but not as a Ray cluster (no HTTP/2 reply)"
    except socket.timeout:
        why = f"no answer within {timeout:g} s"
    except socket.gaierror as e:
        why = f"unknown host {host!r} ({e.strerror})"
    except OSError as e:
        why = (e.strerror or str(e)).lower()
    if why is None and not tls and not address.startswith("ray://"):
        why = _is_ray_gcs(f"{host}:{port}", deadline - time.monotonic())
    if why:
        raise UserError(f"cannot join the Ray cluster at {address}: {why}")


def init_ray(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None) -> bool:
    """Connect to Ray: the running instance of this process, the cluster at ``address``
    (or ``$RAY_ADDRESS``; checked first by :func:`check_address`: one line within
    :data:`CONNECT_TIMEOUT_S` where it is refused or does not answer), or a new local
    instance with ``num_cpus`` / ``num_gpus``. Returns whether this call started (and so
    should shut down) the connection."""
    import logging

    ray = require_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kw: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    if address:
        check_address(address)
        try:
            ray.init(address=address, **kw)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise UserError(f"cannot join the Ray cluster at {address}: {(str(e).splitlines() or [''])[0]}") from None
    else:
        try:
            ray.init(num_cpus=num_cpus, num_gpus=num_gpus, **kw)
        except Exception as e:  # noqa: BLE001 -- a start-up that times out or fails: one line, the cause kept
            raise RuntimeError(f"Ray could not start a local instance: {(str(e).strip().splitlines() or [''])[0]}") \
                from e
    return True


class ClientActor:
    """One Ray actor: the worker (model pool and method) built once by the same
    :meth:`~fedbench.runners.executors.worker.WorkerSpec.build` as the driver's; no client state."""

    def __init__(self, worker_spec: WorkerSpec, profiles: dict, data: Any = None):
        if data is None:
            data = worker_spec.task_cls(worker_spec.spec.task_config).load()
        self.worker = worker_spec.build(data, profiles)

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


@EXECUTORS.register("ray", "clients in a pool of run.workers Ray actors (one model pool each), results in job order")
class RayExecutor(Executor):
    def __init__(self, worker, worker_spec, data, profiles):
        super().__init__(worker, worker_spec, data, profiles)
        ray = require_ray()
        self.ray = ray
        n = worker_spec.spec.run.workers
        cuda = worker.pool.device.type == "cuda"
        threads = worker_spec.spec.run.threads or 1
        self._started = init_ray(num_cpus=max(os.cpu_count() or 1, n * threads),
                                 num_gpus=torch.cuda.device_count() if cuda else None)
        self.actors: list = []
        self._counts = (0, 0)
        try:
            gpus = ray.cluster_resources().get("GPU", 0) if cuda else 0
            opts: dict[str, Any] = dict(num_cpus=threads, num_gpus=min(1.0, gpus / n) if cuda else 0)
            env = runtime_env()
            if env:
                opts["runtime_env"] = env
            # Ray hands each actor its GPU through CUDA_VISIBLE_DEVICES: "cuda" is it
            spec = dataclasses.replace(worker_spec, device="cuda" if cuda else "cpu", threads=threads)
            actor_cls = ray.remote(ClientActor)
            ref = _put_data(ray, data)
            self.actors = [actor_cls.options(**opts).remote(spec, profiles, ref) for _ in range(n)]
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

    def meter_counts(self) -> tuple[int, int]:
        """The actors' meters (they measure; the driver's worker trains nobody)."""
        if self.actors:
            try:
                counts = self.ray.get([a.meter_counts.remote() for a in self.actors], timeout=60)
                self._counts = (sum(c[0] for c in counts), sum(c[1] for c in counts))
            except Exception:  # noqa: BLE001 - a dead actor: the record still gets written
                pass
        return self._counts

    def close(self) -> None:
        ray, actors = self.ray, self.actors
        if actors:
            self.meter_counts()  # their counters go into the record
        self.actors = []
        if actors:
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001
                    pass
        if self._started and ray.is_initialized():
            ray.shutdown()
            self._started = False


__all__ = ["CONNECT_TIMEOUT_S", "ClientActor", "RayExecutor", "RAY_VERSIONS", "check_address", "init_ray",
           "require_ray", "runtime_env"]
