"""The shared base of FedLoRA's model-heterogeneous personalised FL family
(papers/fedlora_model_heterogeneous.txt, Sec. 6.1): :class:`PersonalisedMethod`. The
methods: FedLoRA (:mod:`~fedbench.methods.fedlora`), Standalone and LG-FedAvg
(:mod:`~fedbench.methods.own_model`), FML and FedKD (:mod:`~fedbench.methods.mutual_learning`),
FD and FedProto (:mod:`~fedbench.methods.class_statistics`).

Common to all seven (FedLoRA's evaluation protocol, Sec. 6.1):

- every client owns a whole model of one of the task's architectures (``Task.archs``; for
  the paper's Table 1 CNNs, :mod:`fedbench.tasks.cnn`): one of them for all clients
  (``archs=cnn1``, model-homogeneous) or the task's architectures in turn by client id
  (``archs=hetero``, model-heterogeneous: with CNN-1..5, client c gets CNN-(c mod 5 + 1), the
  paper's assignment; the rule is :func:`assign_arch`); its model must declare its parts
  (``needs_parts``, ``ModelBundle.parts``: feature extractor, representation layer, head,
  and the widths of their outputs), which is how the methods split it and size what reads
  it (never by layer names or a task's tables): cifar10, cifar100_cnn, fashion_mnist,
  tiny_vision with ``model=cnn``;
- the CNN is the client's private state (kept between rounds by the engine's
  ClientStore, starting from the freshly built model of its architecture), trained whole
  (no peft LoRA: ``lora_targets`` defaults to the task's empty profile ``none``);
- evaluation is local: each client's own CNN (its head, FC3) on its own local test split
  (8:1:1), mean over all clients; per-architecture means are in the record. Where a method
  has a second predictor (FML/FedKD's shared model, FedProto's nearest prototype), its
  accuracy is recorded too (``results.extra``), not used as the headline;
- what travels is only what each method shares; global statistics (FD's per-class
  logits, FedProto's prototypes) live in an extra module of frozen tensors
  (``fedbench_extra.<name>.means`` / ``.counts``) so they are part of the global state,
  sent down as a payload and counted as traffic like any tensor; their uploads are
  ``client_statistics`` under the same names.

Shared deviations: one optimizer (the run's SGD/AdamW) for every trained tensor, the
run's epochs for every phase; all methods sample clients uniformly (``run.per_round``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
from torch import nn

from fedbench.config import FieldError, cfg_field
from fedbench.errors import UserError
from fedbench.methods.base import EXTRA_PREFIX, ClientPlan, LocalPhase, Method, MethodConfig, MethodState
from fedbench.tasks.base import PART_NAMES, ModelParts


def extra_keys(name: str, keys: Sequence[str]) -> list[str]:
    """The canonical names of extra module ``name``'s tensors among ``keys``."""
    prefix = f"{EXTRA_PREFIX}.{name}."
    return [k for k in keys if k.startswith(prefix)]


def assign_arch(client: int, archs: str, family: Sequence[str]) -> str:
    """The architecture of ``client``'s model, by the ``archs`` config field: ``'hetero'``
    = the family's architectures in turn by client id, ``family[client mod len(family)]``
    (FedLoRA Sec. 6.1: with CNN-1..5, client c gets CNN-(c mod 5 + 1)); otherwise
    ``archs`` itself, for every client."""
    return family[client % len(family)] if archs == "hetero" else archs


@dataclass(frozen=True)
class PersonalisedConfig(MethodConfig):
    lora_targets: str = cfg_field("none", "LoRA target profile; 'none' (the CNN tasks' empty profile): these methods "
                                          "train whole CNNs, no peft LoRA")
    archs: str = cfg_field("hetero", "client models: 'hetero' = the task's architectures in turn by client id "
                                     "(CNN-(client mod 5 + 1), model-heterogeneous, FedLoRA Sec. 6.1), or one of "
                                     "them (cnn1..cnn5) for every client (model-homogeneous; the paper's is cnn1)")


def check_arch(field: str, arch: str, archs: Sequence[str]) -> None:
    """``method.<field>`` = ``arch`` must name one of the task's architectures ``archs``."""
    if arch not in archs:
        raise FieldError(f"method.{field}", arch, f"must be one of the task's architectures: {', '.join(archs)}")


class PersonalisedMethod(Method):
    """Base of the FedLoRA family: whole private CNNs, local evaluation, nothing shared
    unless a subclass says so (``shared_keys``). ``private_keys`` = the client's model
    (``own_keys``) minus the shared keys; one local phase trains the model and the shared
    keys with ``client_loss``. The model is split by its declared parts (``split``)."""

    config_cls = PersonalisedConfig
    task_kinds = ("classification",)
    evaluation: ClassVar[str] = "local"
    needs_parts: ClassVar[bool] = True

    def __init__(self, config: MethodConfig, ctx):
        super().__init__(config, ctx)
        self.declared_parts(ctx)
        if config.archs != "hetero":
            check_arch("archs", config.archs, ctx.archs)

    @classmethod
    def declared_parts(cls, ctx) -> ModelParts:
        """The parts the task's model declares (``ctx.parts``); a UserError if it declares none."""
        if ctx.parts is None:
            raise UserError(f"{cls.__name__} splits each client's model into feature extractor, "
                            f"representation and head, and this task's model declares no parts")
        return ctx.parts

    # -- architecture ---------------------------------------------------------------------
    def client_arch(self, client: int) -> str:
        return assign_arch(client, self.config.archs, self.ctx.archs)

    def plan(self, rnd, clients, state, rng):
        return {p.client: ClientPlan(p.client, p.tier, (), train_head=False, arch=self.client_arch(p.client))
                for p in clients}

    # -- the client's model and its parts ----------------------------------------------------
    def own_keys(self) -> list[str]:
        """Every tensor of the client's model: its feature extractor, representation layer
        and head, in that order (the same names in every architecture of the family)."""
        return [k for part in PART_NAMES for k in self.ctx.part_keys[part]]

    def split(self, model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(feature extractor output (B, h), representation (B, D), logits (B, C)) of the
        client's model (for the Table 1 CNNs: FC1 output, the 500-d FC2 output, FC3)."""
        return self.ctx.parts.forward(model, x)

    # -- what lives where ----------------------------------------------------------------
    def shared_keys(self) -> list[str]:
        """Model tensors the server averages (sent down, trained, sent up). Default: none."""
        return []

    def down_keys(self) -> list[str]:
        """Tensors sent down: the shared ones (+ global statistics, subclasses)."""
        return self.shared_keys()

    def private_keys(self, plan: ClientPlan) -> list[str]:
        shared = set(self.shared_keys())
        return [k for k in self.own_keys() if k not in shared]

    def model_keys(self, plan: ClientPlan) -> list[str]:
        own = self.own_keys()
        return own + [k for k in self.down_keys() if k not in set(own)]

    def client_payload(self, state: MethodState, plan: ClientPlan) -> dict[str, torch.Tensor]:
        return {k: state.tensors[k] for k in self.down_keys()}

    def upload_keys(self, plan: ClientPlan) -> list[str]:
        return self.shared_keys()

    def local_phases(self, plan: ClientPlan) -> tuple[LocalPhase, ...]:
        own = self.own_keys()
        return (LocalPhase("train", tuple(own + [k for k in self.shared_keys() if k not in set(own)])),)
