"""The hooks of :class:`~fedbench.methods.base.Method`, in five groups, each a class with its
defaults: a new method reads the group it changes. ``Method`` derives from all five, so a
method overrides a hook by defining it, as before; every hook a runner calls is declared
here with its default (runners never probe a method for attributes).

- :class:`Planning`: who does what this round;
- :class:`LocalTraining`: what a client trains and what one step computes;
- :class:`Exchange`: aggregation and traffic, what goes down and up and how it is combined;
- :class:`Evaluation`: the evaluated global model;
- :class:`ModelAndState`: extra modules and the state the method keeps.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import numpy as np
import torch

from fedbench.errors import UserError
from fedbench.methods.aggregation import weighted_mean_by_key
from fedbench.methods.client_api import ClientAPI
from fedbench.methods.plans import (LORA_FACTORS, ClientPlan, ClientProfile, ClientUpdate, LocalPhase, MethodConfig,
                                    MethodContext, MethodState, Traffic, tensor_bytes)


class Planning:
    """What each client does in a round: the config resolved for the task, the proxy set, the federation
    checked, each client's architecture and plan, and the plan a client picks from its own data."""

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

    def client_select(self, plan: ClientPlan, client: ClientAPI) -> ClientPlan:
        """The plan the client trains, chosen on the client before its local training from
        its own data (``client``'s tools) and what ``plan`` carries (e.g. a memory budget and
        cost model, ``MethodContext.memory``). It may change ``train_layers`` and ``extra``
        only (the worker checks); every executor trains, uploads, counts and aggregates the
        returned plan. Default: ``plan`` unchanged (nothing is computed)."""
        return plan

class LocalTraining:
    """What a client trains and what one step computes: the phases and their trainable tensors, the loss,
    the hidden outputs it reads, the statistics uploaded after training, the LoRA factor trained
    this round. Overriding ``client_loss``, ``local_loss`` or ``client_statistics`` makes the step
    the method's own (``Method.STEP_HOOKS``)."""

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

    def quantised_activations(self, plan: ClientPlan) -> dict[int, int]:
        """{physical block j: bits}: the blocks whose activations saved for backward the
        client stores quantised to ``bits`` (dequantised in backward: less memory, extra
        compute; a memory lever, FedQuad's). Every step of the client runs so
        (:mod:`~fedbench.runners.executors.act_quant`, through ``saved_tensors_hooks``), the
        planner's measured step too, and the memory accountant counts the packed bytes. A
        method that overrides it has a step of its own (``Method.STEP_HOOKS``). Default: none."""
        return {}

    def trained_factor(self, rnd: int) -> Literal["A", "B"] | None:
        """The one LoRA factor every client trains (and uploads) in round ``rnd`` (1-based),
        the other frozen and shared so that the average is exact; a method's ``plan`` puts
        it in ``ClientPlan.factor``, which the default ``upload_keys`` honours. Default None:
        both factors."""
        return None

class Exchange:
    """What crosses the boundary and how the server combines it: the payload sent down, the tensors a
    client's model holds, what comes back up (within its upload budget), how its bytes are counted,
    and the aggregation."""

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

    def upload_budget(self, plan: ClientPlan) -> int | None:
        """The most bytes ``plan``'s client may send up (its ``Traffic.up_bytes``, on the plan
        it trained); the round loop refuses a client-round over it (a method that breaks its
        own budget is a bug). Default None: no budget."""
        return None

    def aggregate(self, state: MethodState, updates: Sequence[ClientUpdate]) -> MethodState:
        """The new global state from this round's updates. Default: per tensor, the
        example-weighted mean over the clients that uploaded it (FedAvg)."""
        return MethodState(tensors=weighted_mean_by_key(state.tensors, updates, "examples"), extra=state.extra)

class Evaluation:
    """The evaluated global model: its blocks, the tensors loaded into it, its named logits."""

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

class ModelAndState:
    """What the method adds to every model and what it keeps: extra modules, recorded layout facts, the
    base weights and initial global state, the client's private tensors."""

    @classmethod
    def extra_modules(cls, config: MethodConfig, ctx: MethodContext,
                      head: torch.nn.Module | None) -> dict[str, torch.nn.Module]:
        """Trainable modules the method adds to the model, e.g. early-exit classifiers.

        A class method: the runner attaches the modules, then builds the method with a
        context that is complete (``ctx.extra_keys`` filled in); ``ctx`` here has every
        field but ``extra_keys``. ``head`` is the task's classifier (the last of its head
        modules; None if it has none), a template for the shape. The runner attaches the modules under
        ``fedbench_extra.<name>`` of every model it builds (reach them with
        :func:`~fedbench.methods.plans.extra_module`): their tensors get canonical names (listed in
        ``ctx.extra_keys``), are part of the initial state and travel in payloads and
        uploads like any other tensor. Called under the run's seeded RNG. Default: none.
        """
        return {}

    @classmethod
    def patch_model(cls, config: MethodConfig, model: torch.nn.Module) -> None:
        """Change a model the runner has just built, once, after attaching ``extra_modules``
        (every model: the worker's pool, fresh models for private state, the planner's,
        the global model that is evaluated); e.g. fixed values of frozen tensors drawn from a
        seed in ``config`` and forward hooks through which the extra modules' tensors enter
        the adapted layers (RAVAN's cores between its frozen bases). The worker's pool runs
        it under the extra modules' seed, the planner under none: values it draws must come
        from a generator seeded from ``config`` (as RAVAN's ``basis_seed``), so every process
        builds the same model. A method that
        overrides it has a step of its own (``Method.STEP_HOOKS``: the ``packed`` executor's
        forward does not run these hooks). Default: nothing."""

    def layout(self) -> dict[str, Any]:
        """Structural facts of this run's method worth recording (JSON-serialisable), written
        to ``run.method_layout``, e.g. where DepthFL's classifiers sit. Default: none."""
        return {}

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


__all__ = ["Evaluation", "Exchange", "LocalTraining", "ModelAndState", "Planning"]
