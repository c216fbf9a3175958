"""The run config: federation, local training, tiers, output. Typed and validated."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from fedbench.config import FieldError, build_config, cfg_field, check
from fedbench.errors import UserError


@dataclass(frozen=True)
class RunConfig:
    setting: str = cfg_field("iid", "data split: iid, dir(a), k/a, k/-, domain, domain+dir(a)xm, k/Dd")
    clients: int | None = cfg_field(None, "number of clients (None = the task's default: the papers' 100 for "
                                          "classification, 50 for instruction tuning, 10 for tiny tasks; domain "
                                          "settings derive it from the data)")
    per_round: int | None = cfg_field(None, "clients sampled uniformly per round (None = min(10, clients))")
    rounds: int = cfg_field(5, "communication rounds")
    local_epochs: int = cfg_field(1, "local epochs per round")
    max_steps: int | None = cfg_field(None, "cap on local steps per client per round (None = full epochs)")
    batch_size: int | None = cfg_field(None, "local batch size (None = the task's default)")
    optimizer: Literal["sgd", "adamw"] | None = cfg_field(None, "local optimizer (None = the task's default)")
    lr: float | None = cfg_field(None, "local learning rate (None = the task's default)")
    momentum: float = cfg_field(0.0, "SGD momentum")
    weight_decay: float = cfg_field(0.0, "weight decay")
    grad_clip: float | None = cfg_field(None, "clip the gradient norm to this value")
    roc: str | None = cfg_field(None, "ratio of resource tiers, e.g. 6:3:1 (Fed-HeLLo)")
    capacities: list[int] | None = cfg_field(None, "per-client layer budgets, e.g. 12,10,8,6,4,3 (FedRA)")
    dynamic: bool = cfg_field(False, "redraw each client's budget every round (FedRA Table 4)")
    tier_fractions: list[float] = cfg_field([0.5, 0.75, 1.0], "layer budget of each --roc tier, as a fraction of L")
    tier_ranks: list[int] | None = cfg_field(
        None, "LoRA rank of each tier (rank methods); None = by task kind (Fed-HeLLo Sec. IV-A): 1,4,16 for "
              "classification, 1,1,8 for instruction tuning")
    seed: int = cfg_field(0, "seed of the partition, sampling, allocation and initialisation")
    device: str = cfg_field("auto", "auto (CUDA if present), cpu, cuda, cuda:1, ...")
    server_holdout: int | None = cfg_field(
        None, "test examples held out for the server (Fed-HeLLo's FIM proxy set) and never evaluated, in every "
              "run so every method is scored on the same examples; None = the task's paper size (cifar100 100, "
              "domainnet/nicopp 1000, others 50) capped at half the test split; 0 = none")
    eval_every: int = cfg_field(1, "evaluate the global model every this many rounds (and at the end)")
    eval_initial: bool = cfg_field(False, "also evaluate the model before round 1 (pretrained backbone, fresh "
                                          "adapters and head) into results.initial")
    target_metric: float | None = cfg_field(
        None, "target of the evaluated metric (e.g. 0.8 top-1): the record gives the first round whose metric reaches "
              "it and the parameters transmitted and FLOPs consumed until then (FedLoRA Sec. 6.1); None = no target")
    measure_flops: bool = cfg_field(True, "measure FLOPs/memory on the first step of every client-round")
    local_split: str | None = cfg_field(
        None, "split each client's data into local train:val:test, e.g. 8:1:1 (FedLoRA); None = no split, except "
              "for locally evaluated (personalised) methods, which get 8:1:1")
    divergence_factor: float = cfg_field(
        100.0, "end the run 'failed' when a round's mean training loss exceeds this many times round 1's for two "
               "rounds in a row (0 = never)")
    threads: int | None = cfg_field(None, "torch threads of the process (None = 1 for tiny tasks, else the cores "
                                          "given to the process)")
    store_memory_mb: float = cfg_field(1024.0, "memory for the clients' private state before it spills to disk")
    checkpoint_every: int = cfg_field(1, "write a checkpoint every this many rounds (and after the last) so a "
                                         "killed run resumes when run again; 0 = never")
    keep_checkpoints: bool = cfg_field(False, "keep the checkpoint after the run ends ok")
    out: str = cfg_field("results", "directory of result records")
    runner: str = cfg_field("local", "engine that runs the clients: local (one process), ray (a pool of --workers "
                                     "Ray actors; pip install 'fedbench-peft[ray]')")
    workers: int = cfg_field(1, "client workers of the ray runner (Ray actors, each with its own model pool)")

    def __post_init__(self) -> None:
        for name in ("clients", "per_round", "max_steps", "batch_size"):
            check(self, name, getattr(self, name) is None or getattr(self, name) >= 1, "must be an integer >= 1 (or none)")
        for name in ("rounds", "local_epochs", "eval_every"):
            check(self, name, getattr(self, name) >= 1, "must be an integer >= 1")
        check(self, "server_holdout", self.server_holdout is None or self.server_holdout >= 0,
              "must be an integer >= 0 (or none)")
        check(self, "lr", self.lr is None or self.lr > 0, "must be a number > 0")
        check(self, "momentum", self.momentum >= 0, "must be a number >= 0")
        check(self, "weight_decay", self.weight_decay >= 0, "must be a number >= 0")
        check(self, "grad_clip", self.grad_clip is None or self.grad_clip > 0, "must be a number > 0 (or none: no clipping)")
        check(self, "seed", self.seed >= 0, "must be an integer >= 0")
        check(self, "setting", bool(self.setting.strip()), "must name a data split (iid, dir(a), k/a, domain, ...)")
        check(self, "roc", self.roc is None or bool(str(self.roc).strip()), "must be ratios like 6:3:1 (or none)")
        check(self, "capacities", self.capacities is None or len(self.capacities) > 0,
              "must list at least one per-client layer budget, e.g. 12,10,8 (or leave it out)")
        check(self, "capacities", self.capacities is None or all(c >= 1 for c in self.capacities),
              "every layer budget must be >= 1")
        check(self, "tier_fractions", len(self.tier_fractions) > 0 and all(0 < f <= 1 for f in self.tier_fractions),
              "must be one or more fractions in (0, 1], e.g. 0.5,0.75,1")
        check(self, "tier_ranks", self.tier_ranks is None or (len(self.tier_ranks) > 0
                                                              and all(r >= 1 for r in self.tier_ranks)),
              "must be one or more LoRA ranks >= 1, e.g. 1,4,16")
        check(self, "device", bool(self.device.strip()), "must be auto, cpu, cuda or cuda:N")
        check(self, "out", bool(self.out.strip()), "must be a directory path")
        check(self, "workers", self.workers >= 1, "must be an integer >= 1")
        check(self, "threads", self.threads is None or self.threads >= 1, "must be an integer >= 1 (or none)")
        check(self, "divergence_factor", self.divergence_factor >= 0, "must be a number >= 0 (0 = never)")
        check(self, "checkpoint_every", self.checkpoint_every >= 0, "must be an integer >= 0 (0 = never)")
        check(self, "store_memory_mb", self.store_memory_mb > 0, "must be a number > 0")
        if self.local_split is not None:
            parts = self.local_split.split(":")
            check(self, "local_split", len(parts) == 3 and all(p.strip().isdigit() for p in parts)
                  and int(parts[0]) >= 1 and int(parts[2]) >= 1,
                  "must look like 8:1:1 (train:val:test, train and test >= 1)")
        if self.roc and self.capacities:
            raise UserError("give either --roc (run.roc) or --capacities (run.capacities), not both")


# ------------------------------------------------------------------- whole-run checks
def _looks_like_path(s: str) -> bool:
    return s.startswith(("/", "./", "../", "~")) or s in (".", "..") or "\\" in s


def check_method_config(cfg: Any) -> None:
    """The LoRA fields every method config has (``MethodConfig``): rank, alpha, dropout."""
    r = cfg.lora_r
    check(cfg, "lora_r", r is None or r >= 1, "must be an integer >= 1")
    check(cfg, "lora_alpha", cfg.lora_alpha > 0, "must be a number > 0")
    check(cfg, "lora_dropout", 0 <= cfg.lora_dropout < 1, "must be in [0, 1)")
    check(cfg, "lora_targets", bool(str(cfg.lora_targets).strip()),
          "must name a LoRA target profile the task declares (e.g. default, qv)")


def check_task_config(task_key: str, cfg: Any) -> None:
    """Fields every task config has (``TaskConfig``): evaluation sizes, paths that must exist."""
    check(cfg, "eval_batch_size", cfg.eval_batch_size >= 1, "must be an integer >= 1")
    check(cfg, "eval_max_examples", cfg.eval_max_examples is None or cfg.eval_max_examples >= 1,
          "must be an integer >= 1 (or none: all)")
    if cfg.data_dir is not None:
        d = Path(str(cfg.data_dir)).expanduser()
        check(cfg, "data_dir", bool(str(cfg.data_dir).strip()), "must be a directory path")
        check(cfg, "data_dir", d.is_dir(), "no such directory" if not d.exists() else "not a directory")
    if cfg.model is not None and _looks_like_path(str(cfg.model)):
        check(cfg, "model", Path(str(cfg.model)).expanduser().exists(),
              "no such file or directory (a local model path must exist)")


def _section(fn, section: str, *args) -> None:
    """Run a check that raises a bare FieldError and prefix the field with its section."""
    try:
        fn(*args)
    except FieldError as e:
        raise FieldError(f"{section}.{e.name}", e.value, e.allowed) from None


def validate_run(method: str, task: str, run: Mapping[str, Any] | None, method_config: Mapping[str, Any] | None,
                 task_config: Mapping[str, Any] | None) -> tuple[str, str, RunConfig, Any, Any]:
    """Build and check every config of one run before anything is loaded or built.

    Returns ``(method_key, task_key, run_cfg, method_cfg, task_cfg)``; raises
    :class:`~fedbench.errors.UserError` (one line naming the field, the value and what is
    allowed) on the first problem.
    """
    from fedbench.methods import METHODS
    from fedbench.runners.tiers import parse_roc
    from fedbench.tasks import TASKS
    from fedbench.tasks.partition import parse_setting

    method_key, task_key = METHODS.resolve(method), TASKS.resolve(task)
    method_cls, task_cls = METHODS.get(method_key), TASKS.get(task_key)
    run_cfg = build_config(RunConfig, run or {}, "run")
    method_cfg = build_config(method_cls.config_cls, method_config or {}, "method")
    task_cfg = build_config(task_cls.config_cls, task_config or {}, "task")
    _section(check_method_config, "method", method_cfg)
    _section(check_task_config, "task", task_key, task_cfg)
    kind = task_cls.kind
    if kind is not None and kind not in method_cls.task_kinds:
        raise UserError(f"method {method_key!r} does not support {kind} tasks like {task_key!r}")
    parse_setting(run_cfg.setting)
    if run_cfg.roc:
        fr = parse_roc(str(run_cfg.roc))
        if len(fr) != len(run_cfg.tier_fractions):
            raise UserError(f"--roc {run_cfg.roc!r} has {len(fr)} tiers but run.tier_fractions has "
                            f"{len(run_cfg.tier_fractions)} ({','.join(map(str, run_cfg.tier_fractions))}); "
                            f"set run.tier_fractions to match")
    return method_key, task_key, run_cfg, method_cfg, task_cfg
