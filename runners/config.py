"""The run config: federation, local training, tiers, output. Typed and validated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedbench.config import cfg_field


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
    tier_ranks: list[int] = cfg_field([1, 4, 16], "LoRA rank of each tier (rank methods)")
    seed: int = cfg_field(0, "seed of the partition, sampling, allocation and initialisation")
    device: str = cfg_field("auto", "auto (CUDA if present), cpu, cuda, cuda:1, ...")
    server_holdout: int | None = cfg_field(
        None, "test examples held out for the server (Fed-HeLLo's FIM proxy set) and never evaluated, in every "
              "run so every method is scored on the same examples; None = the task's paper size (cifar100 100, "
              "domainnet/nicopp 1000, others 50) capped at half the test split; 0 = none")
    eval_every: int = cfg_field(1, "evaluate the global model every this many rounds (and at the end)")
    eval_initial: bool = cfg_field(False, "also evaluate the model before round 1 (pretrained backbone, fresh "
                                          "adapters and head) into results.initial")
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
    out: str = cfg_field("results", "directory of result records")
    runner: str = cfg_field("local", "engine that runs the clients: local (one process)")

    def __post_init__(self) -> None:
        for name in ("clients", "rounds", "local_epochs", "eval_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.server_holdout is not None and self.server_holdout < 0:
            raise ValueError("server_holdout must be >= 0")
        if self.per_round is not None and self.per_round < 1:
            raise ValueError("per_round must be >= 1")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.lr is not None and self.lr <= 0:
            raise ValueError("lr must be > 0")
        if self.threads is not None and self.threads < 1:
            raise ValueError("threads must be >= 1")
        if self.divergence_factor < 0:
            raise ValueError("divergence_factor must be >= 0")
        if self.local_split is not None:
            parts = self.local_split.split(":")
            if len(parts) != 3 or not all(p.strip().isdigit() for p in parts) or int(parts[0]) < 1 \
                    or int(parts[2]) < 1:
                raise ValueError(f"local_split must look like 8:1:1 (train:val:test, train and test >= 1), "
                                 f"got {self.local_split!r}")
