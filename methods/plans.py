"""What a method exchanges with the runner: its config (:class:`MethodConfig`), the clients'
budgets and plans, the local phases, the updates, the traffic, the global state, the
context it sees (:class:`MethodContext`) and the server tools behind a typed interface.
The hooks that use them are in :mod:`fedbench.methods.hooks`; :class:`~fedbench.methods.base.Method`
joins them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterable, Literal, Mapping, Sequence

import torch

from fedbench.config import cfg_field, check
from fedbench.methods.client_api import MemoryAPI
from fedbench.tasks.base import ModelBundle, ModelParts


@dataclass(frozen=True)
class MethodConfig:
    """Fields every method has: the LoRA it trains."""

    lora_r: int = cfg_field(8, "LoRA rank")
    lora_alpha: float = cfg_field(16.0, "LoRA alpha (scaling = alpha / r)")
    lora_dropout: float = cfg_field(0.0, "dropout on the LoRA input")
    lora_targets: str = cfg_field(
        "default", "which modules get LoRA: a target profile the task declares ('default', 'proj_fc2', 'qv')"
    )

    def __post_init__(self) -> None:
        """The LoRA checks, the one place they are made (a subclass calls this first).
        ``lora_r`` None (where a subclass allows it) = the paper's rank for the task kind."""
        check(self, "lora_r", self.lora_r is None or self.lora_r >= 1,
              "must be an integer >= 1" + (" (or none: the paper's, by task kind)" if self.lora_r is None else ""))
        check(self, "lora_alpha", self.lora_alpha > 0, "must be a number > 0")
        check(self, "lora_dropout", 0.0 <= self.lora_dropout < 1.0, "must be in [0, 1)")
        check(self, "lora_targets", bool(str(self.lora_targets).strip()),
              "must name a LoRA target profile the task declares (e.g. default, qv)")


@dataclass(frozen=True)
class ClientProfile:
    """A client's resource budget this round (see :mod:`fedbench.runners.core.tiers`)."""

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
    lora_alpha: float | None = None  # alpha of its LoRA adapter (rank methods); None = the global alpha
    arch: str | None = None  # which of the task's architectures its model is (Task.archs); None = the default
    extra: dict[str, Any] = field(default_factory=dict)
    factor: Literal["A", "B"] | None = None  # the one LoRA factor it trains and sends (Method.trained_factor); None = both

    def __post_init__(self) -> None:
        self.train_layers = tuple(sorted(int(j) for j in self.train_layers))
        if len(set(self.train_layers)) != len(self.train_layers):
            raise ValueError(f"client {self.client}: duplicate layers in {self.train_layers}")
        if self.blocks is not None:
            self.blocks = tuple(sorted(int(j) for j in self.blocks))
            missing = set(self.train_layers) - set(self.blocks)
            if missing:
                raise ValueError(f"client {self.client}: trains layers {sorted(missing)} outside its blocks")


@dataclass(frozen=True)
class LocalPhase:
    """One phase of a client's local training: which tensors are trainable and how many
    epochs (None = the run's ``local_epochs``). ``name`` reaches ``client_loss``.
    ``lr_scale``: the factor on the run's learning rate that this phase's optimizer is to
    use (1 = the run's; FFA-LoRA asks for its own, larger rate); ``lr_scales``: (tensor,
    factor) pairs, a tensor named there trains at the run's rate times its own factor
    instead (LoRA-A2: A slower than B, the head at the run's rate). Every executor builds
    the optimizer with :func:`~fedbench.runners.executors.train.phase_optimizer`.
    ``trained_slices``: (tensor, dim, indices) triples, of that tensor only the slices at
    ``indices`` along ``dim`` train (rank masks: rows of A, columns of B); the others keep
    their values, in every executor (:class:`~fedbench.runners.executors.step.KeptEntries`)."""

    name: str
    trainable: tuple[str, ...]
    epochs: int | None = None
    lr_scale: float = 1.0
    lr_scales: tuple[tuple[str, float], ...] = ()
    trained_slices: tuple[tuple[str, int, tuple[int, ...]], ...] = ()


@dataclass
class ClientUpdate:
    """What a client sends up, plus bookkeeping that stays in the simulator."""

    client: int
    tensors: dict[str, torch.Tensor]  # exactly what crosses the boundary upwards (parameters and statistics)
    n_examples: int
    plan: ClientPlan
    train_loss: float | None = None


@dataclass(frozen=True)
class Traffic:
    """Bytes of one client-round (numel x element size): ``down_bytes`` sent to the client
    and ``up_bytes`` sent back, as the record's headline counts them; ``down_variants``:
    ``{label: bytes}``, the same down traffic counted by other conventions (the label says
    what is counted), e.g. FLoRA's dense merged weights, FedRA's frozen blocks."""

    down_bytes: int
    up_bytes: int
    down_variants: dict[str, int] = field(default_factory=dict)


@dataclass
class MethodState:
    """Global state: adapter/head tensors plus method-specific serialisable extras."""

    tensors: dict[str, torch.Tensor]
    extra: dict[str, Any] = field(default_factory=dict)


class ServerAPI:
    """Server-side tools a method may use, behind a typed interface (the runner provides
    the implementation, :class:`fedbench.runners.core.server.ServerTools`; methods never see
    the runner's model). Work done inside ``metered()`` is recorded as server cost."""

    def metered(self) -> ContextManager[None]:
        raise NotImplementedError

    def layer_grad_sq_norms(self, tensors: Mapping[str, torch.Tensor],
                            layer_keys: Mapping[int, Sequence[str]]) -> dict[int, float]:
        """Per layer j: mean over the proxy examples of ||grad_{theta_j} loss||^2 (Fed-HeLLo Eq. 4)."""
        raise NotImplementedError


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
    server: ServerAPI | None = None
    block_bytes: dict[int, int] = field(default_factory=dict)  # frozen base weights per block
    rounds: int = 0  # communication rounds of the run (for schedules such as DepthFL's w(t))
    extra_keys: list[str] = field(default_factory=list)  # tensors of ``Method.extra_modules``, set by the runner
    #: ``init_head(module, template)``: initialise a new classifier shaped like the task's head
    #: ``template`` as the task initialises its head (``Task.init_head``); None = ``tasks.base.init_like``
    init_head: Callable[[torch.nn.Module, torch.nn.Module], None] | None = None
    n_classes: int | None = None  # classes of a classification task (None: not one)
    data_info: dict[str, Any] = field(default_factory=dict)  # the task's ``TaskData.info`` (e.g. in_channels, img_size)
    #: the model's declared parts (``ModelBundle.parts``: feature extractor, representation,
    #: head; None = it declares none) and, per part, the canonical names of its tensors
    parts: ModelParts | None = None
    part_keys: dict[str, list[str]] = field(default_factory=dict)
    #: the run's memory accountant (None: the runner offers none, e.g. in a worker process)
    memory: MemoryAPI | None = None
    #: the architectures the task offers for per-client models (``Task.archs``; the first is
    #: the default) and ``build_model(arch)``: a fresh model of one at the task's data shape
    #: (``Task.build_model``, drawing from the global torch RNG); None = no task
    archs: tuple[str, ...] = ()
    build_model: Callable[[str | None], ModelBundle] | None = None

    def model_of(self, arch: str) -> ModelBundle:
        """A fresh model of architecture ``arch`` (``build_model``, drawing from the global torch
        RNG); a UserError where no task builds models."""
        if self.build_model is None:
            from fedbench.errors import UserError

            raise UserError(f"no task builds a model of architecture {arch!r} here")
        return self.build_model(arch)

    def parts_of(self, arch: str) -> ModelParts:
        """The declared parts of architecture ``arch``'s model, read from a fresh model built
        with the RNG untouched (a UserError if the task builds no models or ``arch`` declares none)."""
        from fedbench.errors import UserError

        with torch.random.fork_rng(devices=[]):
            parts = self.model_of(arch).parts
        if parts is None:
            raise UserError(f"the model of architecture {arch!r} declares no parts")
        return parts

    def keys_for_layers(self, layers: Sequence[int], head: bool = True) -> list[str]:
        keys = [k for j in layers for k in self.layer_keys[j]]
        return keys + (list(self.head_keys) if head else [])

    @property
    def all_keys(self) -> list[str]:
        return self.keys_for_layers(range(self.n_layers))


#: the LoRA factors' tensor suffixes (peft's names): A (r, d_in) down-projection, B (d_out, r) up-projection
LORA_FACTORS: dict[str, str] = {"A": ".lora_A.weight", "B": ".lora_B.weight"}

EXTRA_PREFIX = "fedbench_extra"  # where the runner attaches ``Method.extra_modules`` in a client's model


def extra_module(model: torch.nn.Module, name: str) -> torch.nn.Module:
    """The module ``name`` of ``Method.extra_modules`` inside ``model`` (the client's model
    or the evaluated global model the hook was given)."""
    return model.get_submodule(f"{EXTRA_PREFIX}.{name}")


def tensor_bytes(tensors: Mapping[str, torch.Tensor] | Iterable[torch.Tensor]) -> int:
    """numel x element size summed over ``tensors`` (a name -> tensor mapping or tensors):
    what crossing the boundary, or holding them, costs."""
    values = tensors.values() if isinstance(tensors, Mapping) else tensors
    return int(sum(t.numel() * t.element_size() for t in values))
