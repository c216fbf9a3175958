"""Method interface: a frozen config dataclass plus four hooks.

1. ``plan(round, clients, state, rng)``: which layers / blocks / rank each sampled client
   trains this round (a :class:`ClientPlan` per client).
2. ``client_payload(state, plan)``: exactly the tensors sent down to the client.
3. local training: one shared loop in :mod:`fedbench.runners.train`; a method may add a
   loss term through ``local_loss``.
4. ``aggregate(state, updates)``: a pure tensor function of what was sent up.

Methods never know which runner runs them. Cross-round state (FIM scores, momentum
buffers) lives in :class:`MethodState` (``tensors`` + a JSON-serialisable ``extra``), never
in module globals.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from fedbench.config import cfg_field


@dataclass(frozen=True)
class MethodConfig:
    """Fields every method has: the LoRA it trains."""

    lora_r: int = cfg_field(8, "LoRA rank")
    lora_alpha: float = cfg_field(16.0, "LoRA alpha (scaling = alpha / r)")
    lora_dropout: float = cfg_field(0.0, "dropout on the LoRA input")
    lora_targets: str = cfg_field(
        "default", "which modules get LoRA: a target profile the task declares ('default', 'fedra', 'qv')"
    )

    def __post_init__(self) -> None:
        if self.lora_r < 1:
            raise ValueError("lora_r must be >= 1")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError("lora_dropout must be in [0, 1)")


@dataclass(frozen=True)
class ClientProfile:
    """A client's resource budget this round (see :mod:`fedbench.runners.tiers`)."""

    client: int
    tier: int
    layers: int  # adapter layers it can train (layer methods) = prefix depth (depth methods)
    rank: int  # LoRA rank it can train (rank methods)
    n_examples: int


@dataclass
class ClientPlan:
    """What one client does in one round."""

    client: int
    tier: int
    train_layers: tuple[int, ...]  # adapter layers (block indices) whose LoRA it trains
    blocks: tuple[int, ...] | None = None  # blocks in its forward, ascending; None = all
    rank: int | None = None  # LoRA rank it trains; None = the global rank
    train_head: bool = True
    skip: bool = False  # sits out this round: receives and sends nothing, costs nothing
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.train_layers = tuple(sorted(int(j) for j in self.train_layers))
        if len(set(self.train_layers)) != len(self.train_layers):
            raise ValueError(f"client {self.client}: duplicate layers in {self.train_layers}")
        if self.blocks is not None:
            self.blocks = tuple(sorted(int(j) for j in self.blocks))
            missing = set(self.train_layers) - set(self.blocks)
            if missing:
                raise ValueError(f"client {self.client}: trains layers {sorted(missing)} outside its blocks")


@dataclass
class ClientUpdate:
    """What a client sends up, plus bookkeeping that stays in the simulator."""

    client: int
    tensors: dict[str, torch.Tensor]  # exactly what crosses the boundary upwards
    n_examples: int
    plan: ClientPlan
    train_loss: float | None = None


@dataclass
class MethodState:
    """Global state: adapter/head tensors plus method-specific serialisable extras."""

    tensors: dict[str, torch.Tensor]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MethodContext:
    """What a method may know about the model and the federation (no runner internals).

    ``layer_keys[j]``: names of the LoRA tensors of adapter layer j; ``head_keys``: the
    classifier tensors every client trains; ``server``: optional server-side tools (e.g.
    gradient scores on a proxy set) provided by the runner.
    """

    n_layers: int
    layer_keys: dict[int, list[str]]
    head_keys: list[str]
    profiles: dict[int, ClientProfile]
    lora_r: int
    lora_alpha: float
    task_kind: str = "classification"
    server: Any = None
    block_bytes: dict[int, int] = field(default_factory=dict)  # frozen base weights per block
    rounds: int = 0  # communication rounds of the run (for schedules such as DepthFL's w(t))
    extra_keys: list[str] = field(default_factory=list)  # tensors of ``Method.extra_modules``, set by the runner

    def keys_for_layers(self, layers: Sequence[int], head: bool = True) -> list[str]:
        keys = [k for j in layers for k in self.layer_keys[j]]
        return keys + (list(self.head_keys) if head else [])

    @property
    def all_keys(self) -> list[str]:
        return self.keys_for_layers(range(self.n_layers))


class Method:
    """Base class. Subclasses set ``config_cls`` and override the hooks they change.

    The defaults implement FedAvg over whatever each client trains: send everything the
    client's forward needs, upload what it trained, average each tensor with example
    weights over the clients that uploaded it; tensors nobody trained keep their value.
    """

    config_cls: type[MethodConfig] = MethodConfig
    #: task kinds this method supports ("classification", "generation")
    task_kinds: tuple[str, ...] = ("classification", "generation")

    def __init__(self, config: MethodConfig, ctx: MethodContext):
        self.config = config
        self.ctx = ctx

    # -- resolution before the run builds anything ------------------------------------
    @classmethod
    def resolve_config(cls, config: MethodConfig, task_kind: str) -> MethodConfig:
        """Fill config defaults that depend on the task kind (e.g. a paper's LoRA rank for
        LMs); the runner calls this before building the adapter model. Default: unchanged."""
        return config

    @classmethod
    def proxy_size_for(cls, config: MethodConfig, n_holdout: int) -> int:
        """How many of the ``n_holdout`` test examples the runner holds out for the server
        (``run.server_holdout``) this method's server uses as its proxy set. Default: none."""
        return 0

    # -- hooks ---------------------------------------------------------------------
    def init_state(self, tensors: dict[str, torch.Tensor]) -> MethodState:
        return MethodState(tensors=dict(tensors))

    def plan(
        self, rnd: int, clients: Sequence[ClientProfile], state: MethodState, rng: np.random.Generator
    ) -> dict[int, ClientPlan]:
        raise NotImplementedError

    def client_payload(self, state: MethodState, plan: ClientPlan) -> dict[str, torch.Tensor]:
        """Tensors sent down: the LoRA of every block in the client's forward + the head."""
        blocks = range(self.ctx.n_layers) if plan.blocks is None else plan.blocks
        return {k: state.tensors[k] for k in self.ctx.keys_for_layers(blocks)}

    def upload_keys(self, plan: ClientPlan) -> list[str]:
        """Names of the tensors the client sends back: what it trained."""
        return self.ctx.keys_for_layers(plan.train_layers, head=plan.train_head)

    def local_loss(self, model: torch.nn.Module, batch: Any, outputs: Any, plan: ClientPlan) -> torch.Tensor | None:
        """Extra loss term added to the task loss on the client (None = nothing)."""
        return None

    def aggregate(self, state: MethodState, updates: Sequence[ClientUpdate]) -> MethodState:
        weights = {u.client: float(u.n_examples) for u in updates}
        return MethodState(tensors=weighted_mean_by_key(state.tensors, updates, weights), extra=state.extra)

    def extra_down_bytes(self, plan: ClientPlan) -> int:
        """Bytes sent down besides the payload tensors (e.g. frozen blocks); default none."""
        return 0

    def eval_blocks(self, state: MethodState) -> tuple[int, ...] | None:
        """Blocks of the global model used at evaluation (None = all)."""
        return None

    # -- optional model extensions (DepthFL's early exits) ----------------------------
    def extra_modules(self, head: torch.nn.Module | None) -> dict[str, torch.nn.Module]:
        """Trainable modules the method adds to the model, e.g. early-exit classifiers.

        ``head`` is the task's classifier (the last of its head modules; None if it has
        none), a template for the shape. The runner attaches the modules under
        ``fedbench_extra.<name>``: their tensors get canonical names (listed in
        ``ctx.extra_keys``), are part of the initial state and travel in payloads and
        uploads like any other tensor. Default: none.
        """
        return {}

    def hidden_blocks(self, plan: ClientPlan | None) -> tuple[int, ...]:
        """Physical blocks whose outputs the method reads: in training for ``plan``, at
        evaluation for None. The runner captures them into the ``hidden`` dict it passes to
        ``client_loss`` / ``eval_logits`` ({block: output}, filled during each forward)."""
        return ()

    def client_loss(self, task: Any, model: torch.nn.Module, batch: Any, plan: ClientPlan,
                    hidden: Mapping[int, torch.Tensor]) -> torch.Tensor:
        """The loss a client minimises. Default: the task's loss plus ``local_loss``."""
        loss, outputs = task.loss(model, batch)
        extra = self.local_loss(model, batch, outputs, plan)
        return loss if extra is None else loss + extra

    def eval_logits(self, task: Any, model: torch.nn.Module, batch: Any,
                    hidden: Mapping[int, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """Classification only: named logits of the global model for one batch (the first
        entry is the headline metric; every entry is recorded in ``results.extra``). The
        runner uses this hook only if a subclass overrides it; the default evaluation is the
        task's own."""
        return None

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)


def weighted_mean_by_key(
    current: Mapping[str, torch.Tensor],
    updates: Sequence[ClientUpdate],
    weights: Mapping[int, float],
) -> dict[str, torch.Tensor]:
    """Per tensor: weighted mean over the clients that uploaded it; others unchanged.

    ``new[k] = sum_i w_i x_i[k] / sum_i w_i`` over clients i whose upload has key k
    (FedRA's per-layer rule, FedAvg when everyone uploads everything).
    """
    out = dict(current)
    sums: dict[str, torch.Tensor] = {}
    totals: dict[str, float] = {}
    for u in updates:
        w = float(weights[u.client])
        if w <= 0:
            continue
        for k, t in u.tensors.items():
            t = t.to(device=current[k].device, dtype=torch.float32)
            sums[k] = sums[k] + w * t if k in sums else w * t
            totals[k] = totals.get(k, 0.0) + w
    for k, s in sums.items():
        out[k] = (s / totals[k]).to(current[k].dtype)
    return out


MethodFactory = Callable[[MethodConfig, MethodContext], Method]
