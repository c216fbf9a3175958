"""Method interface: a frozen config dataclass (:class:`MethodConfig`) and the hooks of
:class:`Method` (its docstring lists every hook and class flag), plus what they exchange
with the runner: plans, phases, updates, traffic, the global state and the context.
Local training is one shared loop (:mod:`fedbench.runners.executors.train`) that calls the hooks;
aggregation rules are pure functions (:mod:`fedbench.methods.aggregation`).

Methods never know which runner runs them. Cross-round state (FIM scores, momentum
buffers) lives in :class:`MethodState` (``tensors`` + a JSON-serialisable ``extra``), never
in module globals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, ContextManager, Iterable, Literal, Mapping, Sequence

import numpy as np
import torch

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.methods.aggregation import weighted_mean_by_key
from fedbench.methods.client_api import ClientAPI, MemoryAPI
from fedbench.tasks.base import ModelParts


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


class Method:
    """Base class. Subclasses set ``config_cls`` and override the hooks they change.

    The defaults implement FedAvg over whatever each client trains: send everything the
    client's forward needs, upload what it trained, average each tensor with example
    weights over the clients that uploaded it; tensors nobody trained keep their value.
    Every hook and flag the runner reads is declared here with a default (engines never
    probe a method for attributes or look at its key); all of them, one line each:

    Class flags
      ``config_cls``           the frozen config dataclass (a ``MethodConfig``)
      ``task_kinds``           task kinds it supports
      ``evaluation``           "global": the global model on the test split; "local": each client's own
      ``requires_full_tier``   trains only clients whose budget covers every layer
      ``needs_archs``          architectures the task must offer (``Task.archs``)
      ``communicates``         False: exchanges nothing (local training only)
      ``family``               the section of the methods document it belongs to (plots draw a family together)
      ``STEP_HOOKS``           the local-training hooks that make a step a method's own (``plain_step``)
      ``step_overrides``       (classmethod) the hooks of ``STEP_HOOKS`` it overrides
      ``plain_step``           (classmethod) none overridden: its step is the task's own (executors may pack it)
      ``version``              its rule's version, recorded in ``run.method_version`` (bump on a rule change)
    Planning
      ``resolve_config``       (classmethod) config defaults that depend on the task kind
      ``proxy_size_for``       (classmethod) held-out examples the server uses as its proxy set
      ``check_tiers``          refuse a federation in which it would train nobody
      ``client_arch``          the task architecture of a client's model
      ``plan``                 a :class:`ClientPlan` per sampled client this round (required)
    Payload and traffic
      ``client_payload``       the tensors sent down
      ``model_keys``           the tensors a client's forward uses (payload + private state)
      ``upload_keys``          the tensors sent up: what it trained
      ``traffic``              bytes down and up of a client-round, and other down counts
    Local training
      ``local_phases``         the phases, what each trains, its epochs and lr factor
      ``client_loss``          the loss of a phase (default: the task's loss + ``local_loss``)
      ``local_loss``           an extra loss term
      ``hidden_blocks``        blocks whose outputs ``client_loss`` / ``eval_logits`` read
      ``client_statistics``    non-parameter tensors uploaded after training
    Client-side selection
      ``client_select``        the plan a client trains, chosen on the client from its own data
    Alternation and budgets (RoLoRA, LoRA-A2: shared/docs/methods-2027.md)
      ``trained_factor``       the one LoRA factor (A or B) clients train in a round; None = both
      ``upload_budget``        the most bytes a client may send up; the round loop refuses more
    Aggregation
      ``aggregate``            the new global state from the clients' updates
    Evaluation
      ``eval_blocks``          blocks of the evaluated global model
      ``eval_tensors``         the tensors loaded into the evaluated model
      ``eval_logits``          named logits of the evaluated model (classification)
    Model extensions
      ``extra_modules``        trainable modules added to every model (early exits, shared models)
      ``layout``               structural facts recorded in ``run.method_layout``
    State
      ``base_weights_needed``  frozen base tensors the initial state must hold
      ``init_state``           the global state from the initial model's tensors
      ``private_keys``         tensors that stay on the client between rounds
    """

    config_cls: type[MethodConfig] = MethodConfig
    task_kinds: tuple[str, ...] = ("classification", "generation")
    #: "local" = every client's own model (private state + the global part) on its own local
    #: test split (``run.local_split``), averaged over clients (personalised FL)
    evaluation: ClassVar[Literal["global", "local"]] = "global"
    #: the default ``check_tiers`` refuses a federation without such a client (``exclusive``)
    requires_full_tier: ClassVar[bool] = False
    #: empty = any task of a supported kind (the FedLoRA family needs the Table 1 CNNs)
    needs_archs: ClassVar[tuple[str, ...]] = ()
    #: False (a lower reference): its payloads and uploads are empty by design
    communicates: ClassVar[bool] = True
    #: its family, a section of the methods document (``leaderboard.families`` orders them;
    #: plots draw a crowded section as small multiples, one per family)
    family: ClassVar[str] = "other"
    #: the local-training hooks that change what one step computes (its loss or what is
    #: uploaded from the trained model); a method overriding any of them has a step of its
    #: own (``plain_step`` False), which executors run client by client, never packed. A new
    #: hook of that kind is added here, and every executor follows.
    STEP_HOOKS: ClassVar[tuple[str, ...]] = ("client_loss", "local_loss", "client_statistics")
    #: bump when a change gives its runs other results: recorded (run.method_version), in the run id from 2 on
    version: ClassVar[int] = 1

    def __init__(self, config: MethodConfig, ctx: MethodContext):
        self.config = config
        self.ctx = ctx

    @classmethod
    def step_overrides(cls) -> list[str]:
        """The hooks of ``STEP_HOOKS`` that ``cls`` (or a class between it and ``Method``) defines."""
        below = cls.__mro__[:cls.__mro__.index(Method)]
        return [h for h in Method.STEP_HOOKS if any(h in vars(k) for k in below)]

    @classmethod
    def plain_step(cls) -> bool:
        """Whether a client's step is the task's own supervised step: no hook of
        ``STEP_HOOKS`` overridden (derived from the class, never from its key)."""
        return not cls.step_overrides()

    # -- planning ----------------------------------------------------------------------
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

    def check_tiers(self, profiles: Sequence[ClientProfile]) -> None:
        """Refuse, with a one-line :class:`~fedbench.errors.UserError`, a federation in which
        the method would train nobody. ``profiles``: every budget a client can have (the
        static profiles, or one per reachable tier with ``--dynamic``); the runner calls it
        once after building the method. Default: with ``requires_full_tier``, some client
        must be able to train all ``n_layers`` layers."""
        if self.requires_full_tier and not any(p.layers >= self.ctx.n_layers for p in profiles):
            budgets = sorted({p.layers for p in profiles})
            raise UserError(f"{type(self).__name__.lower()} trains only clients that can train all "
                            f"{self.ctx.n_layers} layers, and no client can (budgets {budgets}); "
                            f"give some client the full tier (e.g. --roc with a full-capacity share)")

    def client_arch(self, client: int) -> str | None:
        """The task architecture of ``client``'s model (None = the task's default). Plans
        carry it; local evaluation uses it for clients never sampled."""
        return None

    def plan(
        self, rnd: int, clients: Sequence[ClientProfile], state: MethodState, rng: np.random.Generator
    ) -> dict[int, ClientPlan]:
        """What each sampled client does in round ``rnd`` (1-based), by client id; random
        draws come from ``rng`` only. No default: every method decides this."""
        raise NotImplementedError

    # -- payload and traffic -----------------------------------------------------------
    def client_payload(self, state: MethodState, plan: ClientPlan) -> dict[str, torch.Tensor]:
        """Tensors sent down: the LoRA of every block in the client's forward + the head."""
        blocks = range(self.ctx.n_layers) if plan.blocks is None else plan.blocks
        return {k: state.tensors[k] for k in self.ctx.keys_for_layers(blocks)}

    def model_keys(self, plan: ClientPlan) -> list[str]:
        """What a client's model contains beyond frozen base weights: the tensors its
        forward uses, which must arrive in its payload or its private state (the engine
        checks: no hidden channel). Default: the LoRA of its blocks + the head."""
        blocks = range(self.ctx.n_layers) if plan.blocks is None else plan.blocks
        return self.ctx.keys_for_layers(blocks, head=True)

    def upload_keys(self, plan: ClientPlan) -> list[str]:
        """Names of the model tensors the client sends back: what it trained (with
        ``plan.factor``, of the LoRA only that factor)."""
        keys = self.ctx.keys_for_layers(plan.train_layers, head=plan.train_head)
        if plan.factor is None:
            return keys
        other = LORA_FACTORS["B" if plan.factor == "A" else "A"]
        return [k for k in keys if not k.endswith(other)]

    def traffic(self, plan: ClientPlan, payload: Mapping[str, torch.Tensor],
                upload: Mapping[str, torch.Tensor]) -> Traffic:
        """One client-round's traffic: ``down_bytes`` is the headline down count
        (``cost.traffic_mb_per_client_round``, what the papers count), ``up_bytes`` the up
        count, ``down_variants`` other ways of counting the same down traffic
        (``cost.traffic_alt_mb_per_client_round``, up unchanged; e.g. FLoRA's merged base
        weights). ``payload``: what the engine sent down; ``upload``: what came back.
        Default: the bytes of ``payload`` and of ``upload``, no variants."""
        return Traffic(down_bytes=tensor_bytes(payload), up_bytes=tensor_bytes(upload))

    # -- local training ----------------------------------------------------------------
    def local_phases(self, plan: ClientPlan) -> tuple[LocalPhase, ...]:
        """The phases of local training. Default: one phase training the upload keys."""
        return (LocalPhase("train", tuple(self.upload_keys(plan))),)

    def client_loss(self, task: Any, model: torch.nn.Module, batch: Any, plan: ClientPlan,
                    hidden: Mapping[int, torch.Tensor], phase: str = "train") -> torch.Tensor:
        """The loss a client minimises in local phase ``phase``. Default: the task's loss
        plus ``local_loss``."""
        loss, outputs = task.loss(model, batch)
        extra = self.local_loss(model, batch, outputs, plan)
        return loss if extra is None else loss + extra

    def local_loss(self, model: torch.nn.Module, batch: Any, outputs: Any, plan: ClientPlan) -> torch.Tensor | None:
        """Extra loss term added to the task loss on the client (None = nothing)."""
        return None

    def hidden_blocks(self, plan: ClientPlan | None) -> tuple[int, ...]:
        """Physical blocks whose outputs the method reads: in training for ``plan``, at
        evaluation for None. The runner captures them into the ``hidden`` dict it passes to
        ``client_loss`` / ``eval_logits`` ({block: output}, filled during each forward)."""
        return ()

    def client_statistics(self, task: Any, model: torch.nn.Module, batches: Callable[[], Iterable[Any]],
                          plan: ClientPlan) -> dict[str, torch.Tensor]:
        """Tensors that are not parameters, computed on the client after training and
        uploaded with its parameters (per-class mean logits, prototypes, counts);
        ``batches()`` iterates over its training data. Counted as traffic. Default: none."""
        return {}

    # -- client-side selection (Fed-pilot's knapsack) ------------------------------------
    def client_select(self, plan: ClientPlan, client: ClientAPI) -> ClientPlan:
        """The plan the client trains, chosen on the client before its local training from
        its own data (``client``'s tools) and what ``plan`` carries (e.g. a memory budget and
        cost model, ``MethodContext.memory``). It may change ``train_layers`` and ``extra``
        only (the worker checks); every executor trains, uploads, counts and aggregates the
        returned plan. Default: ``plan`` unchanged (nothing is computed)."""
        return plan

    # -- alternation and budgets (RoLoRA, LoRA-A2) --------------------------------------
    def trained_factor(self, rnd: int) -> Literal["A", "B"] | None:
        """The one LoRA factor every client trains (and uploads) in round ``rnd`` (1-based),
        the other frozen and shared so that the average is exact; a method's ``plan`` puts
        it in ``ClientPlan.factor``, which the default ``upload_keys`` honours. Default None:
        both factors."""
        return None

    def upload_budget(self, plan: ClientPlan) -> int | None:
        """The most bytes ``plan``'s client may send up (its ``Traffic.up_bytes``, on the plan
        it trained); the round loop refuses a client-round over it (a method that breaks its
        own budget is a bug). Default None: no budget."""
        return None

    # -- aggregation -------------------------------------------------------------------
    def aggregate(self, state: MethodState, updates: Sequence[ClientUpdate]) -> MethodState:
        """The new global state from this round's updates. Default: per tensor, the
        example-weighted mean over the clients that uploaded it (FedAvg)."""
        return MethodState(tensors=weighted_mean_by_key(state.tensors, updates, "examples"), extra=state.extra)

    # -- evaluation --------------------------------------------------------------------
    def eval_blocks(self, state: MethodState) -> tuple[int, ...] | None:
        """Blocks of the global model used at evaluation (None = all)."""
        return None

    def eval_tensors(self, state: MethodState) -> dict[str, torch.Tensor]:
        """The tensors loaded into the model that is evaluated (base weights among them,
        e.g. FlexLoRA's merged W0 + dW, apply to that evaluation only). Default: the state."""
        return state.tensors

    def eval_logits(self, task: Any, model: torch.nn.Module, batch: Any,
                    hidden: Mapping[int, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """Classification only: named logits of the evaluated model for one batch (the first
        entry is the headline metric; every entry is recorded in ``results.extra``).
        Default None: the task's own forward."""
        return None

    # -- model extensions (DepthFL's early exits, the FedLoRA family's shared modules) ---
    @classmethod
    def extra_modules(cls, config: MethodConfig, ctx: MethodContext,
                      head: torch.nn.Module | None) -> dict[str, torch.nn.Module]:
        """Trainable modules the method adds to the model, e.g. early-exit classifiers.

        A class method: the runner attaches the modules, then builds the method with a
        context that is complete (``ctx.extra_keys`` filled in); ``ctx`` here has every
        field but ``extra_keys``. ``head`` is the task's classifier (the last of its head
        modules; None if it has none), a template for the shape. The runner attaches the modules under
        ``fedbench_extra.<name>`` of every model it builds (reach them with
        :func:`extra_module`): their tensors get canonical names (listed in
        ``ctx.extra_keys``), are part of the initial state and travel in payloads and
        uploads like any other tensor. Called under the run's seeded RNG. Default: none.
        """
        return {}

    def layout(self) -> dict[str, Any]:
        """Structural facts of this run's method worth recording (JSON-serialisable), written
        to ``run.method_layout``, e.g. where DepthFL's classifiers sit. Default: none."""
        return {}

    # -- state -------------------------------------------------------------------------
    def base_weights_needed(self) -> list[str]:
        """Frozen base tensors of the model that ``init_state`` must also receive (e.g. the
        pretrained weights FLoRA merges into). Default: none."""
        return []

    def init_state(self, tensors: dict[str, torch.Tensor]) -> MethodState:
        """The global state from the initial model's adapter/head/extra tensors (plus
        ``base_weights_needed``)."""
        return MethodState(tensors=dict(tensors))

    def private_keys(self, plan: ClientPlan) -> list[str]:
        """Tensors of the client's model that stay on the client between rounds (its
        private state, kept by the engine's ClientStore; never uploaded). They start from
        the freshly initialised model of its architecture. Default: none."""
        return []


def tensor_bytes(tensors: Mapping[str, torch.Tensor] | Iterable[torch.Tensor]) -> int:
    """numel x element size summed over ``tensors`` (a name -> tensor mapping or tensors):
    what crossing the boundary, or holding them, costs."""
    values = tensors.values() if isinstance(tensors, Mapping) else tensors
    return int(sum(t.numel() * t.element_size() for t in values))
