"""RunSpec: the frozen, typed, fully resolved description of one run.

:func:`build_spec` is the one function that turns what a user gave (CLI flags, a YAML
config, a sweep row, the Python API: a method key, a task key and three mappings of
fields) into a :class:`RunSpec`: every config built and validated, the task's defaults
filled in (clients, batch size, optimizer, lr, the paper's tier ranks, the local split
of personalised methods), the method's config resolved for the task's kind. Nothing is
loaded or built, so a sweep finds each run's record path from its spec in milliseconds.

The run id, the record's ``run`` configs and the leaderboard's row variant all derive
from the spec through the fields' roles (:mod:`fedbench.config`): identity = every field
whose role is ``result``, ``axis`` or ``record``; runtime fields (output folder, threads,
executor, data location, ...) are in neither.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from fedbench.version import RUN_ID_VERSION
from fedbench import records
from fedbench.config import IDENTITY_ROLES, RESULT, config_to_dict, values_with_roles, without_defaults
from fedbench.configs import RunConfig, eval_period
from fedbench.runners.core.config import validate_run
from fedbench.runners.core.tiers import check_capacities, tier_ranks_for
from fedbench.tasks.partition import n_clients_for
from fedbench.tasks.setting import parse_setting
from fedbench.runners.core.federation import check_per_round


@dataclass(frozen=True)
class TrainSettings:
    """What the local training loop reads of a run: these fields of :class:`RunConfig`,
    under the same names (:meth:`of`); the planner builds one for a planned step."""

    local_epochs: int
    batch_size: int
    optimizer: str
    lr: float
    momentum: float
    weight_decay: float
    grad_clip: float | None
    max_steps: int | None  # cap on steps per client per round and phase (None = full epochs)
    precision: str = "fp32"  # of the forward: fp32 or bf16 (autocast, runners.executors.precision)

    @classmethod
    def of(cls, run: RunConfig) -> "TrainSettings":
        return cls(**{f.name: getattr(run, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class LoraSettings:
    """The LoRA every client's model carries (from the method's config)."""

    r: int
    alpha: float
    dropout: float
    targets: str  # a LoRA target profile the task declares


@dataclass(frozen=True)
class RunSpec:
    method: str  # registry key (aliases resolved)
    task: str
    run: RunConfig  # task defaults filled in
    method_config: Any  # the method's config dataclass, resolved for the task's kind
    task_config: Any  # the task's config dataclass

    # -- the registered classes --------------------------------------------------------
    @property
    def method_cls(self) -> type:
        from fedbench.methods import METHODS

        return METHODS.get(self.method)

    @property
    def task_cls(self) -> type:
        from fedbench.tasks import TASKS

        return TASKS.get(self.task)

    # -- derived settings ----------------------------------------------------------------
    @property
    def lora(self) -> LoraSettings:
        mc = self.method_config
        return LoraSettings(mc.lora_r, mc.lora_alpha, mc.lora_dropout, mc.lora_targets)

    @property
    def train(self) -> TrainSettings:
        return TrainSettings.of(self.run)

    @property
    def resource_label(self) -> str:
        r = self.run
        if r.devices:  # device budgets never share a cell with the papers' tiers
            return f"devices {r.devices}" + (f" deadline {r.deadline:g}s" if r.deadline else "")
        return (r.roc or (",".join(map(str, r.capacities)) if r.capacities else "-")) + (" dyn" if r.dynamic else "")

    # -- identity --------------------------------------------------------------------------
    def configs(self, roles: tuple[str, ...] = IDENTITY_ROLES) -> dict[str, dict[str, Any]]:
        """``{"run": ..., "method": ..., "task": ...}``: the fields whose role is in ``roles``."""
        return {"run": values_with_roles(RunConfig, config_to_dict(self.run), roles),
                "method": values_with_roles(type(self.method_config), config_to_dict(self.method_config), roles),
                "task": values_with_roles(type(self.task_config), config_to_dict(self.task_config), roles)}

    @functools.cached_property
    def run_id(self) -> str:
        """A hash of the method and task keys, every identity field that differs from its
        declared default (:func:`~fedbench.config.without_defaults`: a new field at its
        default changes no existing id), the suite version run ids hash
        (:data:`~fedbench.version.RUN_ID_VERSION`, frozen: a release renames no finished run)
        and the method's ``version`` from 2 on (a bumped rule gets new ids; 1 adds nothing,
        like a field at its default)."""
        return _hash_identity(self._identity)

    @functools.cached_property
    def _identity(self) -> dict[str, Any]:
        """What :attr:`run_id` hashes."""
        c = self.configs()
        c = {"run": without_defaults(RunConfig, c["run"]),
             "method": without_defaults(type(self.method_config), c["method"]),
             "task": without_defaults(type(self.task_config), c["task"])}
        identity = {"method": self.method, "method_config": c["method"], "task": self.task,
                    "task_config": c["task"], "run": c["run"], "version": RUN_ID_VERSION}
        if self.method_cls.version != 1:
            identity["method_version"] = self.method_cls.version
        return identity

    def with_seed(self, seed: int) -> "RunSpec":
        """This run at another ``seed`` (validated as :class:`RunConfig` validates it), its
        run id derived from this spec's identity with only the seed changed: what
        :func:`build_spec` gives for the same fields, without rebuilding and re-hashing every
        config (a sweep's seeds axis; ``tests/runners/test_sweep_scale.py`` checks the ids agree)."""
        spec = replace(self, run=replace(self.run, seed=seed))
        run = {k: v for k, v in self._identity["run"].items() if k != "seed"}
        run.update(without_defaults(RunConfig, {"seed": seed}))
        spec.__dict__["_identity"] = {**self._identity, "run": run}  # cached_property's slot: frozen fields untouched
        return spec

    def variant(self) -> dict[str, Any]:
        """Every field that can change a result (role ``result``), dotted: ``lr``,
        ``method.lora_r``, ``task.seq_len``: the leaderboard's row variant."""
        c = self.configs((RESULT,))
        return {**c["run"], **{f"method.{k}": v for k, v in c["method"].items()},
                **{f"task.{k}": v for k, v in c["task"].items()}}

    def record_path(self) -> Path:
        return records.record_path(self.run.out, {"run": {"task": self.task, "method": self.method,
                                                          "run_id": self.run_id}})


def _hash_identity(identity: dict[str, Any]) -> str:
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def with_profile(task: str, profile: str | None, run: Mapping[str, Any] | None,
                 task_config: Mapping[str, Any] | None) -> tuple[dict, dict]:
    """``run`` and ``task_config`` with the values of the task's ``profile``
    (:attr:`~fedbench.tasks.base.Task.profiles`) where they set none; an unknown profile is
    one :class:`~fedbench.errors.UserError` line naming the task's profiles."""
    run, task_config = dict(run or {}), dict(task_config or {})
    if profile is None:
        return run, task_config
    from fedbench.errors import UserError
    from fedbench.tasks import TASKS

    key = TASKS.resolve(task)
    profiles = TASKS.get(key).profiles
    if profile not in profiles:
        have = f"its profiles: {', '.join(sorted(profiles))}" if profiles else "it declares none"
        raise UserError(f"task {key!r} has no profile {profile!r} ({have})")
    values = profiles[profile]
    return {**values.get("run", {}), **run}, {**values.get("task", {}), **task_config}


def build_spec(method: str, task: str, run: Mapping[str, Any] | RunConfig | None = None,
               method_config: Mapping[str, Any] | None = None,
               task_config: Mapping[str, Any] | None = None, profile: str | None = None) -> RunSpec:
    """Build and validate every config of one run and fill in the task's defaults (first
    its ``profile``'s values, where given, for the fields left unset); one
    :class:`~fedbench.errors.UserError` line on the first problem."""
    if isinstance(run, RunConfig):
        run = config_to_dict(run)
    run, task_config = with_profile(task, profile, run, task_config)
    method_key, task_key, run_cfg, method_cfg, task_cfg = validate_run(method, task, run, method_config, task_config)
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    method_cls, task_cls = METHODS.get(method_key), TASKS.get(task_key)
    d, r = task_cls.run_defaults, run_cfg
    run_cfg = replace(
        run_cfg,
        setting=parse_setting(r.setting).canonical,  # "IID", " iid" and "iid" are one split, one run id
        clients=r.clients if r.clients is not None else d.clients,
        batch_size=r.batch_size or d.batch_size,
        optimizer=r.optimizer or d.optimizer,
        lr=r.lr or d.lr,
        eval_every=eval_period(r.rounds, r.eval_every, task_cls.tiny),  # None = the default schedule, its number recorded
        local_split=r.local_split or ("8:1:1" if method_cls.evaluation == "local" else None),
        tier_ranks=tier_ranks_for(r.tier_ranks, task_cls.kind),  # None = the paper's, by task kind
    )
    setting = parse_setting(run_cfg.setting)
    if not setting.needs_domains:  # the client count is known now (a domain setting takes it from the data)
        n_clients = n_clients_for(setting, run_cfg.clients, None)
        check_per_round(run_cfg.per_round, n_clients)
        check_capacities(run_cfg.capacities, n_clients, run_cfg.dynamic)
    return RunSpec(method_key, task_key, run_cfg, method_cls.resolve_config(method_cfg, task_cls.kind), task_cfg)


__all__ = ["LoraSettings", "RunSpec", "build_spec", "with_profile"]
