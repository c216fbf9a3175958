"""The typed configs every run has: :class:`RunConfig` (federation, local training, tiers,
output) and :class:`TaskConfig` (the fields every task's config has).

They live in the base package, beside :mod:`fedbench.config`, so that everything reading a
record (the leaderboard) can see each field's role without importing the runners or torch.
Each field's role and flag are declared here (see :mod:`fedbench.config`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from fedbench.config import AXIS, RECORD, RUNTIME, FieldSpec, cfg_field, check, check_int, field_specs
from fedbench.errors import UserError, shown
from fedbench.numbers import exact_number


#: more torch threads (or Ray workers) than any machine has cores: refused before set-up
MAX_THREADS = 1024
#: a learning rate beyond this overflows float32 updates at once
MAX_LR = 1e6


#: scored rounds of a run under the default evaluation schedule (plus the last round)
EVAL_POINTS = 10
#: fewest rounds between evaluations of a real task by default: scoring its whole test
#: split every round took 14 % of a licenses/MiniLM run (benchmarks/licenses_cpu.yaml,
#: README "Evaluation schedule"), every second round half that
REAL_TASK_MIN_PERIOD = 2


def eval_period(rounds: int, eval_every: int | None, tiny: bool) -> int:
    """Rounds between evaluations: ``eval_every`` when given, else ceil(rounds / EVAL_POINTS),
    about ten points of the learning curve, and for a real task at least
    ``REAL_TASK_MIN_PERIOD``. A tiny task's test split costs next to nothing: runs of up
    to 10 rounds evaluate every round (the old default, so their run ids are unchanged)."""
    if eval_every is not None:
        return eval_every
    return max(1 if tiny else REAL_TASK_MIN_PERIOD, -(-rounds // EVAL_POINTS))


def parse_roc_exact(roc: str) -> list[Fraction]:
    """The tier shares of ``--roc a:b:c`` as exact fractions a/(a+b+c), ... (decimal ratios
    such as 0.6:0.4 are read exactly as written, not as binary floats)."""
    try:
        parts = [exact_number(p) for p in roc.split(":")]
    except ValueError as e:
        raise UserError(f"malformed --roc {shown(roc)}: expected ratios like 6:3:1 ({e})") from None
    if len(parts) < 1 or any(p < 0 for p in parts) or sum(parts) <= 0:
        raise UserError(f"malformed --roc {shown(roc)}: expected non-negative ratios like 6:3:1")
    total = sum(parts)
    return [p / total for p in parts]


def parse_roc(roc: str) -> list[float]:
    return [float(f) for f in parse_roc_exact(roc)]


@dataclass(frozen=True)
class RunConfig:
    """Everything about a run that is neither the method's nor the task's config. Each
    field's role (see :mod:`fedbench.config`) says whether it is part of the run's
    identity; every field has a ``fedbench run`` flag."""

    setting: str = cfg_field("iid", "data split: iid, dir(a), k/a, k/-, domain, domain+dir(a)xm, k/Dd",
                             role=AXIS, flag=True)
    clients: int | None = cfg_field(None, "number of clients (None = the task's default: the papers' 100 for "
                                          "cifar100, domainnet, nicopp and ledgar, 50 for instruction tuning, 10 "
                                          "for the CNN and tiny tasks; domain settings derive it from the data)",
                                    flag=True)
    per_round: int | None = cfg_field(None, "clients sampled uniformly per round (None = min(10, clients))", flag=True)
    rounds: int = cfg_field(5, "communication rounds", flag=True)
    local_epochs: int = cfg_field(1, "local epochs per round", flag=True)
    max_steps: int | None = cfg_field(None, "cap on local steps per client per round (None = full epochs)", flag=True)
    batch_size: int | None = cfg_field(None, "local batch size (None = the task's default)", flag=True)
    optimizer: Literal["sgd", "adamw"] | None = cfg_field(None, "local optimizer (None = the task's default)",
                                                          flag=True)
    lr: float | None = cfg_field(None, "local learning rate (None = the task's default)", flag=True)
    momentum: float = cfg_field(0.0, "SGD momentum", flag=True)
    weight_decay: float = cfg_field(0.0, "weight decay", flag=True)
    grad_clip: float | None = cfg_field(None, "clip the gradient norm to this value", flag=True)
    precision: Literal["fp32", "bf16"] = cfg_field(
        "fp32", "precision of every forward (training and evaluation): fp32, or bf16 = torch.autocast to bfloat16 "
                "(parameters, gradients and optimizer state stay float32)", flag=True)
    roc: str | None = cfg_field(None, "ratio of resource tiers, e.g. 6:3:1 (Fed-HeLLo)", role=AXIS, flag=True)
    capacities: list[int] | None = cfg_field(None, "per-client layer budgets, e.g. 12,10,8,6,4,3 (FedRA)",
                                             role=AXIS, flag=True)
    dynamic: bool = cfg_field(False, "redraw each client's budget every round (FedRA Table 4)", flag=True)
    tier_fractions: list[float] = cfg_field([0.5, 0.75, 1.0], "layer budget of each --roc tier, as a fraction of L",
                                            flag=True)
    tier_ranks: list[int] | None = cfg_field(
        None, "LoRA rank of each tier (rank methods); None = by task kind (Fed-HeLLo Sec. IV-A): 1,4,16 for "
              "classification, 1,1,8 for instruction tuning", flag=True)
    devices: str | None = cfg_field(
        None, "clients as device classes instead of tiers: shares phone:6,laptop:3,workstation:1 or a per-client list "
              "phone,laptop (cycled); each method gives a device's clients the largest allocation in its own currency "
              "(layers, rank, depth, participation) whose measured memory fits the device, and every round records "
              "its simulated time on the devices", role=AXIS, flag=True)
    device_catalog: str | None = cfg_field(
        None, "YAML file of device classes added to or replacing the shipped catalogue (memory_gb, tflops: {fp32, "
              "bf16}, uplink_mbps, downlink_mbps, source)", role=RECORD, flag=True)
    deadline: float | None = cfg_field(
        None, "with --devices: simulated seconds a round waits; a client whose simulated compute + transfer takes "
              "longer is dropped from that round's aggregation (recorded per round)", role=AXIS, flag=True)
    seed: int = cfg_field(0, "seed of the partition, sampling, allocation and initialisation", role=AXIS, flag=True)
    device: str = cfg_field("auto", "auto (CUDA if present), cpu, cuda, cuda:1, ...", role=RECORD, flag=True)
    server_holdout: int | None = cfg_field(
        None, "test examples held out for the server (Fed-HeLLo's FIM proxy set) and never evaluated, in every "
              "run so every method is scored on the same examples; None = the task's paper size (cifar100 100, "
              "domainnet/nicopp 1000, others 50) capped at half the test split; 0 = none", flag=True)
    eval_every: int | None = cfg_field(
        None, "evaluate the global model every this many rounds (and at the end); None = about 10 scored rounds "
              "over the run: every ceil(rounds / 10) rounds, at least every 2 for real tasks (tiny tasks: every "
              "round up to 10 rounds); the run's config records the number",
        role=RECORD, flag=True)
    eval_initial: bool = cfg_field(False, "also evaluate the model before round 1 (pretrained backbone, fresh "
                                          "adapters and head) into results.initial", role=RECORD, flag=True)
    target_metric: float | None = cfg_field(
        None, "target of the evaluated metric (e.g. 0.8 top-1): the record gives the first round whose metric reaches "
              "it and the parameters transmitted and FLOPs consumed until then (FedLoRA Sec. 6.1); None = no target",
                      role=RECORD, flag=True)
    measure_flops: bool = cfg_field(
        True, "measure FLOPs and accounted memory on one step of each distinct model shape (architecture, blocks, "
              "trainable set, rank, batch shape); later client-rounds of that shape reuse the figures",
        role=RECORD, flag=True)
    local_split: str | None = cfg_field(
        None, "split each client's data into local train:val:test, e.g. 8:1:1 (FedLoRA); None = no split, except "
              "for locally evaluated (personalised) methods, which get 8:1:1", flag=True)
    divergence_factor: float = cfg_field(
        100.0, "end the run 'failed' when a round's mean training loss exceeds this many times the loss before any "
               "update (round 1's first steps) for two rounds in a row (0 = never)", role=RECORD, flag=True)
    threads: int | None = cfg_field(None, "torch threads of the process (None = 1 for tiny tasks, else the cores "
                                          "given to the process)", role=RUNTIME, flag=True)
    store_memory_mb: float = cfg_field(1024.0, "memory for the clients' private state before it spills to disk",
                                       role=RUNTIME, flag=True)
    checkpoint_every: int = cfg_field(1, "write a checkpoint every this many rounds (and after the last) so a "
                                         "killed run resumes when run again; 0 = never", role=RUNTIME, flag=True)
    keep_checkpoints: bool = cfg_field(False, "keep the checkpoint after the run ends ok", role=RUNTIME, flag=True)
    save_model: bool = cfg_field(
        False, "at the end of an ok run, save the global model beside the record: <run_id>.adapter/ (peft adapter: "
               "LoRA + head), <run_id>.global.safetensors (other global tensors, if any), <run_id>.private/ (each "
               "client's private part, personalised methods); the record names them in run.saved_model",
        role=RUNTIME, flag=True)
    out: str = cfg_field("results", "directory of result records", role=RUNTIME, flag=True)
    log: list[Literal["tensorboard", "mlflow", "wandb"]] = cfg_field(
        [], "experiment tracker(s) fed every round's score, training loss and costs and the run's config, under "
            "<out>/logs/<tracker>/ (repeat the flag for several; each needs its extra: pip install "
            "'fedbench-peft[tensorboard]', [mlflow] or [wandb])", role=RUNTIME, flag=True)
    executor: str = cfg_field(
        "local", "what executes a round's client jobs: local (one after another in this process), packed (clients "
                 "sharing a backbone in one forward/backward per step), ray (a pool of --workers Ray actors; pip "
                 "install 'fedbench-peft[ray]'); --runner is an older name",
        role=RUNTIME, flag="--executor", aliases=("runner",))
    workers: int = cfg_field(1, "client workers of the ray executor (Ray actors, each with its own model pool)",
                             role=RUNTIME, flag=True)

    def __post_init__(self) -> None:
        for name in ("clients", "per_round", "max_steps", "batch_size"):
            check(self, name, getattr(self, name) is None or getattr(self, name) >= 1, "must be an integer >= 1 (or none)")
        for name in ("rounds", "local_epochs"):
            check(self, name, getattr(self, name) >= 1, "must be an integer >= 1")
        check(self, "eval_every", self.eval_every is None or self.eval_every >= 1,
              "must be an integer >= 1 (or none: about 10 scored rounds over the run)")
        check(self, "server_holdout", self.server_holdout is None or self.server_holdout >= 0,
              "must be an integer >= 0 (or none)")
        check(self, "lr", self.lr is None or 0 < self.lr <= MAX_LR, f"must be a number > 0 and <= {MAX_LR:g}")
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
        check(self, "device", re.fullmatch(r"auto|cpu|mps|cuda(:\d{1,3})?", self.device) is not None,
              "must be auto, cpu, mps, cuda or cuda:N")
        check(self, "out", bool(self.out.strip()), "must be a directory path")
        check(self, "log", len(set(self.log)) == len(self.log), "must name each tracker once")
        check(self, "workers", self.workers >= 1, "must be an integer >= 1")
        check(self, "threads", self.threads is None or 1 <= self.threads <= MAX_THREADS,
              f"must be an integer from 1 to {MAX_THREADS} (or none)")
        check(self, "workers", self.workers <= MAX_THREADS, f"must be an integer from 1 to {MAX_THREADS}")
        check(self, "divergence_factor", self.divergence_factor >= 0, "must be a number >= 0 (0 = never)")
        check(self, "checkpoint_every", self.checkpoint_every >= 0, "must be an integer >= 0 (0 = never)")
        check(self, "store_memory_mb", self.store_memory_mb > 0, "must be a number > 0")
        if self.local_split is not None:
            parts = self.local_split.split(":")
            check(self, "local_split", len(parts) == 3 and all(p.strip().isdigit() for p in parts)
                  and int(parts[0]) >= 1 and int(parts[2]) >= 1,
                  "must look like 8:1:1 (train:val:test, train and test >= 1)")
        check(self, "deadline", self.deadline is None or self.deadline > 0, "must be a number of seconds > 0 (or none)")
        if self.devices and (self.roc or self.capacities):
            raise UserError("give either --devices (run.devices) or --roc / --capacities, not both")
        if self.devices and self.dynamic:
            raise UserError("--dynamic redraws tiers; with --devices a client's budget is its device: give one or the other")
        if self.deadline is not None and not self.devices:
            raise UserError("--deadline (run.deadline) needs --devices: a round's time is simulated on the devices")
        if self.roc and self.capacities:
            raise UserError("give either --roc (run.roc) or --capacities (run.capacities), not both")
        if self.device_catalog is not None and not self.devices:
            raise UserError("--device-catalog (run.device_catalog) needs --devices: without device classes it "
                            "would change nothing but the run id")
        if self.workers != 1 and self.executor != "ray":
            raise UserError(f"--workers {self.workers} is for --executor ray; the {self.executor} executor runs "
                            "its clients in this process, with no workers")


@dataclass(frozen=True)
class TaskConfig:
    """Fields common to every task (a task's config subclasses this)."""

    data_dir: str | None = cfg_field(None, "local data directory (offline path); None = the task's default source",
                                     role=RUNTIME, flag=True)
    model: str | None = cfg_field(None, "model: a registered alias, an HF id, a timm name or a local path", flag=True)
    eval_batch_size: int = cfg_field(256, "batch size at evaluation (no backward: as large as memory allows)",
                                     role=RECORD)
    eval_max_examples: int | None = cfg_field(None, "evaluate on at most this many test examples (None = all)")

    def __post_init__(self) -> None:
        """Range checks (a :class:`~fedbench.config.FieldError` names the field); a task's
        config with fields of its own checks them in its ``__post_init__`` after calling
        this one, and states there the sizes the task can hold (memory, the model's
        positions), so an oversized value is refused before anything is loaded."""
        for name, value in (("data_dir", self.data_dir), ("model", self.model)):
            check(self, name, value is None or (value.strip() != "" and "\x00" not in value),
                  "must be a non-empty name or path without NUL characters (or none)")
        check_int(self, "eval_batch_size", 1)
        check_int(self, "eval_max_examples", 1, optional=True)


def flag_fields() -> list[tuple[str, FieldSpec]]:
    """(section, field) of every config field that has a command-line flag: the run's fields
    and the fields every task has (``--data-dir``, ``--model``)."""
    return [("run", f) for f in field_specs(RunConfig) if f.flag] + \
        [("task", f) for f in field_specs(TaskConfig) if f.flag]


__all__ = ["EVAL_POINTS", "REAL_TASK_MIN_PERIOD", "RunConfig", "TaskConfig", "eval_period", "flag_fields", "parse_roc",
           "parse_roc_exact"]
