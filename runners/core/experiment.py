"""An Experiment: one run of a method on a task, from its spec to its record.

It loads the task's data once, builds the federation (partition, local splits, the
server's hold-out), the model pool, the tiers, the method and the worker (one builder:
:meth:`~fedbench.runners.executors.worker.WorkerSpec.build`, the same the Ray actors use), the
client store, the evaluator and the executor (``run.executor``:
:data:`~fedbench.runners.executors.executor.EXECUTORS`), then hands the rounds to the one round
loop (:func:`~fedbench.runners.core.rounds.run_rounds`) and writes the record. It never trains
a client itself: the worker does.

A run always ends with a result record: ``ok``, or ``failed`` (exception, NaN loss,
divergence, CUDA OOM) / ``cancelled`` (Ctrl-C, SIGTERM) with the rounds it finished. A
record that says ``ok`` is never replaced by one that does not: the failed or cancelled
re-run of a finished run leaves the finished record as it was.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from fedbench import records
from fedbench.errors import UserError
from fedbench.outfiles import check_output
from fedbench.runners.outputs import checkpoint, failures
from fedbench.runners.executors import ray_executor  # noqa: F401 - registers the "ray" executor (imports ray only when used)
from fedbench.runners.executors import packed  # noqa: F401 - registers the "packed" executor
from fedbench.runners.outputs.callbacks import Callback, DeadlineGuard, DivergenceGuard
from fedbench.runners.core.environment import check_torchvision, resolve_device, resolve_threads
from fedbench.runners.core.evaluation import Evaluator
from fedbench.runners.executors.executor import EXECUTORS, Executor
from fedbench.runners.core.federation import Federation, build_federation
from fedbench.runners.outputs.report import Outcome, build_record
from fedbench.runners.core.rounds import Loop, run_rounds
from fedbench.runners.outputs.saving import save_model
from fedbench.runners.core.server import ServerTools
from fedbench.runners.budget.simtime import SimClock, device_tiers, probe_setup
from fedbench.runners.core.signals import Cancelled, SignalGuard, cancel_on_signals
from fedbench.runners.core.spec import RunSpec, build_spec
from fedbench.runners.core.state import RunState
from fedbench.runners.cost.stepcost import StepAccountant
from fedbench.runners.core.store import ClientStore
from fedbench.runners.core.tiers import TierAssigner
from fedbench.runners.executors.step import NonFiniteLoss
from fedbench.runners.executors.worker import ClientWorker, ModelPool, WorkerSpec
from fedbench.tasks.base import TaskData
from fedbench.units import MB

log = logging.getLogger(__name__)


class Experiment:
    """One run. ``Experiment(spec)`` or ``Experiment(method, task, run, method_config,
    task_config)`` (built into a spec by :func:`~fedbench.runners.core.spec.build_spec`).
    ``callbacks``: extra :class:`~fedbench.runners.outputs.callbacks.Callback` objects; ``data``:
    the task's data loaded already (a sweep loads a task once)."""

    def __init__(self, method: str | RunSpec, task: str | None = None, run: Mapping[str, Any] | None = None,
                 method_config: Mapping[str, Any] | None = None, task_config: Mapping[str, Any] | None = None,
                 callbacks: list[Callback] | None = None, data: TaskData | None = None):
        self.spec = method if isinstance(method, RunSpec) else build_spec(method, task, run, method_config,
                                                                          task_config)
        spec = self.spec
        self.task = spec.task_cls(spec.task_config)
        missing = [a for a in spec.method_cls.needs_archs if a not in self.task.archs()]
        if missing:
            raise UserError(f"method {spec.method!r} needs the architectures {', '.join(missing)}, which task "
                            f"{spec.task!r} does not offer with this config (it has: {', '.join(self.task.archs())})")
        EXECUTORS.resolve(spec.run.executor)
        self.device = resolve_device(spec.run.device)
        check_torchvision()  # a mismatched torch/torchvision pair fails here, not deep in a model import
        self.threads = resolve_threads(spec.run.threads, self.task.tiny)
        self.user_callbacks = list(callbacks or [])
        self.data = data
        # set up by setup(); a run that fails before the end of it still writes its record from what was set
        self.fed: Federation | None = None
        self.tiers: TierAssigner | None = None
        self.clock: SimClock | None = None  # --devices: the simulated clock of the rounds
        self.devices: dict | None = None  # --devices: the record's run.devices section
        self.worker: ClientWorker | None = None
        self.store: ClientStore | None = None
        self.server: ServerTools | None = None
        self.state: RunState | None = None
        self._server_before = (0.0, 0.0)  # server cost held by the checkpoint a run resumed from
        self._elapsed_before = 0.0  # seconds held by the checkpoint a run resumed from
        self._t_start: float | None = None  # when this process started the run (perf_counter)
        self.saved_model: dict | None = None  # run.save_model: the files written (run.saved_model)

    # -- shortcuts --------------------------------------------------------------------------
    @property
    def method(self):
        return None if self.worker is None else self.worker.method

    @property
    def pool(self):
        return None if self.worker is None else self.worker.pool

    @property
    def am(self):
        """The driver's model of the default architecture (global model, evaluation)."""
        return None if self.worker is None else self.worker.pool.get()

    def record_path(self) -> Path:
        return self.spec.record_path()

    # -- set-up ------------------------------------------------------------------------------
    def setup(self) -> None:
        r = self.spec.run
        torch.set_num_threads(self.threads)
        np.random.seed(r.seed % 2**32)  # third-party code (timm, peft) may draw from these
        torch.manual_seed(r.seed)
        if self.data is None:
            with self.phase("loading data"):
                self.data = self.task.load()
        with self.phase("building the model"):
            self._build()

    def _build(self) -> None:
        """The federation, the model pool, the tiers, the method and its worker."""
        spec, r = self.spec, self.spec.run
        self.fed = fed = build_federation(spec, self.task.server_holdout, self.data)
        wspec = WorkerSpec.of(spec, str(self.device), self.threads)
        pool = ModelPool(self.task, self.data, spec.lora, r.seed, self.device)
        am = pool.get()
        if r.devices:  # tiers = device classes, each given the largest allocation that fits it
            self.tiers, self.clock, self.devices = device_tiers(spec, am, self.task, self.data, fed.n_clients)
        else:
            self.tiers = TierAssigner(
                fed.n_clients, am.bundle.n_layers, roc=r.roc, capacities=r.capacities, dynamic=r.dynamic,
                tier_fractions=list(r.tier_fractions), tier_ranks=r.tier_ranks, max_rank=spec.lora.r, seed=r.seed,
            )
        profiles = self.tiers.static_profiles(fed.sizes)
        self.server = ServerTools(am, self.task, fed.proxy, self.device)
        s = probe_setup(spec, am, self.task, self.data)  # a batch of the run's shape for the memory accountant
        memory = StepAccountant(am, self.task, s.batch, s.settings)
        self.worker = wspec.build(self.data, profiles, server=self.server, pool=pool, memory=memory)
        self.worker.method.check_tiers(self.tiers.reachable_profiles(fed.sizes))
        self.store = ClientStore(checkpoint.clients_path(self.record_path()), int(r.store_memory_mb * MB))
        self.evaluator = Evaluator(self.worker.method, self.task, am, fed, self.store, self.data.domain_names,
                                   spec.run.precision)
        self.worker_spec, self.profiles = wspec, profiles

    @contextlib.contextmanager
    def phase(self, name: str):
        """Tell the callbacks (the progress bar prints a line) that a set-up phase starts and ends."""
        for cb in self.user_callbacks:
            cb.on_phase_start(name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            for cb in self.user_callbacks:
                cb.on_phase_end(name, time.perf_counter() - t0)

    def make_executor(self) -> Executor:
        return EXECUTORS.get(self.spec.run.executor)(self.worker, self.worker_spec, self.data, self.profiles)

    # -- run ---------------------------------------------------------------------------------
    def run(self) -> tuple[dict, Path]:
        """Run (or resume from its checkpoint) and write the record. A finished ``ok``
        record of the same run is never replaced by a failed or cancelled one. The first
        SIGTERM or Ctrl-C from here on (set-up included) cancels the run; later ones
        cannot stop the record from being written."""
        with cancel_on_signals() as guard:
            return self._run(guard)

    def _run(self, guard: SignalGuard) -> tuple[dict, Path]:
        t_start = self._t_start = time.perf_counter()
        spec = self.spec
        status, error, executor, resume = "ok", None, None, None
        ckpt = checkpoint.checkpoint_path(self.record_path())
        try:
            check_output(self.record_path(), spec.run.out)  # where the record goes, before training (exit 2)
            self.setup()
            executor = self.make_executor()
            m = self.worker.method
            init = m.init_state(self.am.read(self.am.all_keys + m.base_weights_needed()))
            restored = checkpoint.restore(ckpt, spec.run_id, self.store, self.device)
            self.state = restored.state or RunState(init)
            self._server_before = (self.state.server_flops, self.state.server_seconds)
            self._elapsed_before = self.state.elapsed_before
            if restored.state is not None:
                resume = {"from_round": self.state.rounds_done, "discarded_checkpoint": None}
                if self.worker.meter is not None and self.state.meter is not None:
                    self.worker.meter.load_state_dict(self.state.meter)
                log.info("resuming %s from its checkpoint after round %d", spec.run_id, self.state.rounds_done)
            else:
                if restored.discarded:
                    resume = {"from_round": 0, "discarded_checkpoint": restored.discarded}
                if spec.run.eval_initial:
                    with self.phase("initial evaluation"):
                        self.state.initial_eval, _ = self.evaluator.evaluate(self.state.method, executor)
            loop = self.make_loop(executor, ckpt)
            for cb in loop.callbacks:
                cb.on_run_start(spec, self.state)
            stop = run_rounds(loop, self.state, self.state.rounds_done + 1)
            if stop is not None:
                status, error = stop.status, stop.reason
            elif spec.run.save_model:
                self.saved_model = save_model(self.record_path(), self.pool, m, m.eval_tensors(self.state.method),
                                              self.store, self.fed.n_clients, spec.lora)
        except KeyboardInterrupt as e:
            status, error = "cancelled", "terminated (SIGTERM)" if isinstance(e, Cancelled) else "interrupted (Ctrl-C)"
        except NonFiniteLoss as e:
            status, error = "failed", f"{e} in round {self._rounds_done() + 1}"
        except torch.cuda.OutOfMemoryError as e:
            status, error = "failed", "CUDA out of memory: " + str(e).splitlines()[0]
        except UserError as e:
            if executor is None:  # bad input found while setting up: one line, exit 2, no record
                raise
            status, error = "failed", str(e)  # bad data found while training (e.g. an unreadable image)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure leaves a record; user code's sys.exit is not obeyed
            tb = failures.write_traceback(e, failures.traceback_path(self.record_path()), spec.run.out)
            status, error = "failed", failures.describe(e, tb)
        finally:
            guard.hold()  # from here on a signal cannot interrupt writing the record
            counts = executor.meter_counts() if executor is not None else (0, 0)
            if executor is not None:
                executor.close()
            if self.store is not None:
                # the private state stays on disk for a resume unless the run ended ok
                done_ok = status == "ok" and not spec.run.keep_checkpoints
                self.store.close() if done_ok else self.store.release()
        if self.state is not None:
            self.sync_state(self.state)
        elapsed = self._elapsed_before + time.perf_counter() - t_start
        rec = self.record(Outcome(status, error, elapsed, self.device, self.threads, counts, resume))
        path = self.write(rec)
        if status == "ok" and not spec.run.keep_checkpoints:
            checkpoint.remove(ckpt)
        self.run_end(rec, path)
        return rec, path

    def run_end(self, rec: dict, path: Path) -> None:
        """The user callbacks' ``on_run_end``; one that fails (or calls ``sys.exit``) leaves
        the written record as it is and ends the command with one line (AfterRecord)."""
        problems = []
        for cb in self.user_callbacks:
            try:
                cb.on_run_end(rec)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - user code: reported, not obeyed
                tb = failures.write_traceback(e, failures.traceback_path(path), self.spec.run.out)
                problems.append(f"{type(cb).__name__}.on_run_end failed after the {rec['status']} record {path} "
                                f"was written: {failures.describe(e, tb, beside=False)}")
        if problems:
            raise failures.AfterRecord(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))

    def make_loop(self, executor: Executor, ckpt: Path) -> Loop:
        r = self.spec.run
        callbacks: list[Callback] = [DivergenceGuard(r.divergence_factor)]
        if r.deadline is not None:
            callbacks.append(DeadlineGuard(r.rounds, r.deadline))
        if r.checkpoint_every:
            callbacks.append(checkpoint.Checkpointer(ckpt, r.checkpoint_every, r.rounds, self.spec.run_id, self.store,
                                                     self.sync_state))
        callbacks += self.user_callbacks
        return Loop(r.seed, r.rounds, r.eval_every, self.fed, self.tiers, self.worker.method, self.store, executor,
                    self.evaluator, callbacks, self.device, self.clock)

    def sync_state(self, state: RunState) -> None:
        """Bring the state's meter, server figures and elapsed seconds up to date (before a
        checkpoint or the record): the server's cost and the time since this process started
        the run, on top of what a resumed run's checkpoint held (so a resumed run's
        ``cost.seconds_total`` counts the time before the interruption, up to its checkpoint)."""
        if self._t_start is not None:
            state.elapsed_before = self._elapsed_before + time.perf_counter() - self._t_start
        if self.worker is not None and self.worker.meter is not None:
            state.meter = self.worker.meter.state_dict()
        if self.server is not None:
            state.server_flops = self._server_before[0] + self.server.flops
            state.server_seconds = self._server_before[1] + self.server.seconds

    def _rounds_done(self) -> int:
        return self.state.rounds_done if self.state else 0

    def record(self, outcome: Outcome) -> dict:
        m = self.method
        archs = {c: self.pool.arch(m.client_arch(c)) for c in range(self.fed.n_clients)} if m is not None else {}
        rec = build_record(self.spec, outcome, self.state, self.fed, self.tiers, m, archs)
        rec["run"]["saved_model"] = self.saved_model
        rec["run"]["devices"] = self.devices
        return rec

    def write(self, rec: dict) -> Path:
        return write_run_record(self.spec, rec)


def write_run_record(spec: RunSpec, rec: dict) -> Path:
    """Write ``rec`` at the run's record path (the one record writer, atomic), unless that
    would replace a finished (``ok``) record with one that is not: then the new one goes
    beside it (``<run_id>.<status>.json``) and the finished one stays byte-identical. Used
    by a run and by a sweep's driver for the records its runs on other nodes send back."""
    path = spec.record_path()
    if rec["status"] != "ok" and records.is_finished(path):
        path = path.with_suffix(f".{rec['status']}.json")
        log.warning("run %s ended %s; its finished record is kept and this one is written to %s",
                    spec.run_id, rec["status"], path)
    try:
        return records.write_record(rec, path, spec.run.out)
    except OSError as e:
        raise UserError(f"cannot write the record {path}: {e.strerror or e}") from None


__all__ = ["Cancelled", "Experiment", "write_run_record"]
