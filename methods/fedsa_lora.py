"""FedSA-LoRA (Guo et al., ICLR 2025): A shared and averaged, B and the head private to each
client; scored by personalised (local) evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedbench.config import cfg_field
from fedbench.methods import METHODS
from fedbench.methods.aggregation import Weighting, weighted_mean_by_key
from fedbench.methods.base import ClientPlan, LocalPhase, Method, MethodConfig, MethodState
from fedbench.methods.rank_hetero import A_SFX, B_SFX, lora_modules


@dataclass(frozen=True)
class FedSALoRAConfig(MethodConfig):
    lora_r: int = cfg_field(8, "LoRA rank (the authors' GLUE config: 8)")
    lora_alpha: float = cfg_field(16.0, "LoRA alpha (the authors' GLUE config: 16)")
    lora_dropout: float = cfg_field(0.05, "dropout on the LoRA input (the authors' GLUE config: 0.05)")
    weighting: Weighting = cfg_field(
        "examples", "client weights of A's mean: example counts (the authors weight by the samples processed in "
                    "the round, proportional to them when every client runs the same epochs) or uniform")


@METHODS.register("fedsa_lora", "FedSA-LoRA: only A is shared and averaged; B and the head stay on each client "
                                "(personalised: each client's model scored on its own test split)")
class FedSALoRA(Method):
    """FedSA-LoRA (Guo et al., "Selective Aggregation for Low-Rank Adaptation in Federated
    Learning", ICLR 2025; spec: shared/docs/methods-2026.md Sec. 2).

    Clients train A, B and the head (every layer, the global rank; budgets are ignored).
    They upload A_k only (r x d_in per module); B_k and the classifier never leave the
    client (the GLUE config's ``local_param: ['lora_B', 'classifier']``): they are its
    private state, kept by the engine's client store between rounds and starting from
    the fresh model (B = 0, the task's initial head). Server: A_bar = sum_k p_k A_k, sent
    down (r x d_in per module); client k's next model is W0 + s B_k A_bar with its own head.

    No global model exists: evaluation is personalised (``evaluation = "local"``): each
    client's (A_bar, own B_k, own head) on its own local test split (``run.local_split``,
    8:1:1 by default), averaged over all clients; a client never sampled is scored with
    A_bar and the fresh B and head. Deviation from the authors' code: its
    ``share_local_model: True`` makes every client and the server share one model object,
    so B appears to pass from client to client (spec's reading); here each client keeps
    its own. Classification only: the private head is the classifier (an LM's head is
    often tied to its embeddings).
    """
    family = "shared-A personalised LoRA"

    config_cls = FedSALoRAConfig
    task_kinds = ("classification",)
    evaluation: ClassVar[str] = "local"

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.modules = lora_modules(ctx.all_keys)

    def shared_keys(self) -> list[str]:
        return [m + A_SFX for m in self.modules]

    def plan(self, rnd, clients, state, rng):
        layers = tuple(range(self.ctx.n_layers))
        return {p.client: ClientPlan(p.client, p.tier, layers) for p in clients}

    def client_payload(self, state, plan):
        return {k: state.tensors[k] for k in self.shared_keys()}

    def upload_keys(self, plan):
        return self.shared_keys()

    def private_keys(self, plan):
        return [m + B_SFX for m in self.modules] + list(self.ctx.head_keys)

    def local_phases(self, plan):
        return (LocalPhase("train", tuple(self.shared_keys() + self.private_keys(plan))),)

    def aggregate(self, state, updates):
        return MethodState(weighted_mean_by_key(state.tensors, updates, self.config.weighting), state.extra)

    def eval_tensors(self, state):
        """The shared part (A_bar); each client's B and head come from its private state."""
        return {k: state.tensors[k] for k in self.shared_keys()}
