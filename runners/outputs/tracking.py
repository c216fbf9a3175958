"""Experiment trackers as callbacks: ``--log tensorboard`` / ``mlflow`` / ``wandb`` (``run.log``).

Each tracker is a :class:`~fedbench.runners.outputs.callbacks.Callback` that writes, under
``<out>/logs/<tracker>/``:

* the run's config once (method, task, run id and every identity field of the spec's
  configs, dotted: ``run.rounds``, ``method.lora_r``, ``task.seq_len``: :func:`flat_config`);
* per round (:func:`round_metrics`): ``score/<metric>`` (when the round was evaluated),
  ``train_loss``, ``cost/tflops`` (the round's client FLOPs, when measured),
  ``cost/traffic_mb`` (down + up, 1 MB = 1e6 bytes, as the record), ``cost/seconds``
  (round wall time without evaluation), ``cost/client_seconds``, ``cost/eval_seconds``;
* at the end (:func:`final_metrics`): the record's final and best score and cost totals,
  and its status.

``launch.execute`` adds them for ``fedbench run``, ``fedbench sweep`` and
:func:`fedbench.run` alike; a tracker whose package is missing is refused before anything
loads with one line naming the extra to install. Each (re)start of a run is one tracker
run (a resumed run continues at its next round).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Sequence

from fedbench.errors import UserError
from fedbench.registry import Registry
from fedbench.runners.outputs.callbacks import Callback
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.core.state import RoundLog, RunState

if TYPE_CHECKING:
    from fedbench.runners.core.spec import RunSpec

MB = 1e6

#: the trackers ``run.log`` names (its field type lists the same keys: a test checks)
TRACKERS: Registry = Registry("tracker")


def flat_config(spec: "RunSpec") -> dict[str, object]:
    """Method, task, run id and every identity field of the run, dotted (lists as text)."""
    out: dict[str, object] = {"method": spec.method, "task": spec.task, "run_id": spec.run_id}
    for section, values in spec.configs().items():
        for k, v in values.items():
            out[f"{section}.{k}"] = v if v is None or isinstance(v, (bool, int, float, str)) else json.dumps(v)
    return out


def round_metrics(log: RoundLog, costs: Sequence[ClientCost], metric_name: str) -> dict[str, float]:
    """What a tracker records for one round: ``log`` and the ``costs`` of its clients."""
    out: dict[str, float] = {}
    if log.metric is not None:
        out[f"score/{metric_name}"] = log.metric
    if log.train_loss is not None:
        out["train_loss"] = log.train_loss
    if any(c.first_batch for c in costs):  # FLOPs measured (run.measure_flops)
        out["cost/tflops"] = sum(c.flops_total for c in costs) / 1e12
    out["cost/traffic_mb"] = sum(c.down_bytes + c.up_bytes for c in costs) / MB
    out["cost/seconds"] = log.seconds
    out["cost/client_seconds"] = log.client_seconds
    out["cost/eval_seconds"] = log.eval_seconds
    return out


def final_metrics(record: dict) -> dict[str, float]:
    """The record's headline figures (those it has)."""
    res, cost = record["results"], record["cost"]
    figures = {f"final/{res['metric_name']}": res["final"], f"best/{res['metric_name']}": res["best"],
               "total/tflops": cost["tflops_total"], "total/traffic_mb": cost["traffic_mb_total"],
               "total/seconds": cost["seconds_total"]}
    return {k: float(v) for k, v in figures.items() if v is not None}


class Tracker(Callback):
    """Base of the ``--log`` trackers: turns the callbacks into ``open`` / ``write`` /
    ``finish`` calls of one backend."""

    packages: ClassVar[tuple[str, ...]]  # the modules it imports
    extra: ClassVar[str]  # the fedbench-peft extra that installs them

    def __init__(self) -> None:
        self.metric_name = "score"
        self.active = False

    def on_run_start(self, spec, state: RunState) -> None:
        self.metric_name = spec.task_cls.metric_name
        self.open(spec, Path(spec.run.out) / "logs", flat_config(spec))
        self.active = True

    def on_round_end(self, log: RoundLog, state: RunState):
        if self.active:
            self.write(log.round, round_metrics(log, [c for r, c in state.costs if r == log.round], self.metric_name))
        return None

    def on_run_end(self, record: dict) -> None:
        if self.active:
            self.active = False
            self.finish(record, record["run"]["rounds_completed"], final_metrics(record))

    # -- the backend -----------------------------------------------------------------------
    def open(self, spec: "RunSpec", logs: Path, config: dict[str, object]) -> None:
        """Start a tracker run under ``logs`` and record ``config``."""
        raise NotImplementedError

    def write(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` of round ``step``."""
        raise NotImplementedError

    def finish(self, record: dict, step: int, metrics: dict[str, float]) -> None:
        """Record the final ``metrics`` (at round ``step``) and the status; close."""
        raise NotImplementedError


@TRACKERS.register("tensorboard", "TensorBoard event files (torch.utils.tensorboard)")
class TensorBoardTracker(Tracker):
    """``<out>/logs/tensorboard/<task>/<method>/<run_id>/``: ``tensorboard --logdir <out>/logs/tensorboard``."""

    packages, extra = ("tensorboard",), "tensorboard"

    def open(self, spec, logs, config):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logs / "tensorboard" / spec.task / spec.method / spec.run_id))
        self.writer.add_text("config", "    " + json.dumps(config, indent=1).replace("\n", "\n    "))

    def write(self, step, metrics):
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()  # readable while the run goes on

    def finish(self, record, step, metrics):
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.writer.add_text("status", record["status"] + (f": {record['error']}" if record["error"] else ""), step)
        self.writer.close()


@TRACKERS.register("mlflow", "MLflow runs in a local store (mlflow.MlflowClient)")
class MLflowTracker(Tracker):
    """Experiment ``fedbench/<task>`` in the SQLite store ``<out>/logs/mlflow/mlflow.db``
    (``mlflow ui --backend-store-uri sqlite:///<out>/logs/mlflow/mlflow.db``; MLflow 3 no
    longer writes plain-file stores), or at ``MLFLOW_TRACKING_URI`` where that is set; one
    MLflow run per (re)start, named ``<method>/<run_id>``."""

    packages, extra = ("mlflow", "sqlalchemy", "alembic"), "mlflow"  # the SQLite store needs the last two
    STATUS = {"ok": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}

    def open(self, spec, logs, config):
        from mlflow.tracking import MlflowClient

        store = (logs / "mlflow").resolve()
        store.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store}/mlflow.db")
        name = f"fedbench/{spec.task}"
        found = self.client.get_experiment_by_name(name)
        exp_id = found.experiment_id if found is not None else self.client.create_experiment(
            name, artifact_location=(store / "artifacts").as_uri())
        self.run_id = self.client.create_run(exp_id, run_name=f"{spec.method}/{spec.run_id}",
                                             tags={"fedbench.run_id": spec.run_id}).info.run_id
        for k, v in config.items():
            self.client.log_param(self.run_id, k, "None" if v is None else v)

    def write(self, step, metrics):
        for k, v in metrics.items():
            self.client.log_metric(self.run_id, k, v, step=step)

    def finish(self, record, step, metrics):
        self.write(step, metrics)
        self.client.set_terminated(self.run_id, status=self.STATUS[record["status"]])


@TRACKERS.register("wandb", "Weights & Biases runs (wandb.init; offline with WANDB_MODE=offline)")
class WandbTracker(Tracker):
    """Project ``fedbench``, group ``<task>``, run ``<method>/<run_id>``, files under
    ``<out>/logs/wandb``; where it syncs (online, offline) is wandb's own setting."""

    packages, extra = ("wandb",), "wandb"

    def open(self, spec, logs, config):
        import wandb

        logs.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project="fedbench", group=spec.task, name=f"{spec.method}/{spec.run_id}",
                              dir=str(logs), config=config, reinit="create_new")  # wandb adds "wandb/"

    def write(self, step, metrics):
        self.run.log(metrics, step=step)

    def finish(self, record, step, metrics):
        self.run.summary.update({**metrics, "status": record["status"]})
        self.run.finish(exit_code={"ok": 0, "failed": 1, "cancelled": 130}[record["status"]])


def trackers_for(names: Sequence[str]) -> list[Tracker]:
    """The trackers ``run.log`` names; one :class:`UserError` line for one whose package is
    not installed (before anything loads)."""
    out = []
    for name in names:
        cls = TRACKERS.get(name)
        missing = [p for p in cls.packages if importlib.util.find_spec(p) is None]
        if missing:
            raise UserError(f"--log {name} needs the {missing[0]} package: pip install 'fedbench-peft[{cls.extra}]'")
        out.append(cls())
    return out


__all__ = ["MLflowTracker", "TRACKERS", "TensorBoardTracker", "Tracker", "WandbTracker", "final_metrics",
           "flat_config", "round_metrics", "trackers_for"]
