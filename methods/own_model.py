"""FedLoRA's baselines that exchange (a part of) the client's own model
(papers/fedlora_model_heterogeneous.txt, Sec. 6.1): Standalone (nothing) and LG-FedAvg
(the head). The family's shared protocol is in :mod:`fedbench.methods.personalised`."""

from __future__ import annotations

from typing import ClassVar, Sequence

from torch.nn import functional as F

from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate, MethodState
from fedbench.methods.personalised import PersonalisedMethod


@METHODS.register("standalone", "each client trains its own CNN on its own data; nothing is exchanged "
                                "(lower reference of FedLoRA Sec. 6)")
class Standalone(PersonalisedMethod):
    """Standalone: local training only (FedLoRA's lower reference, Sec. 6.1).

    Each client trains its private CNN with cross-entropy on its local training split
    whenever it is sampled; payloads and uploads are empty (0 bytes both ways) and the
    server does nothing. No deviation.
    """
    family = "FedLoRA family (personalised)"

    communicates: ClassVar[bool] = False

    def aggregate(self, state: MethodState, updates: Sequence[ClientUpdate]) -> MethodState:
        return state

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        return F.cross_entropy(model(batch["x"]), batch["y"])


@METHODS.register("lg_fedavg", "LG-FedAvg: private representation layers, shared classifier averaged")
class LGFedAvg(PersonalisedMethod):
    """LG-FedAvg (Liang et al. 2020, "Think Locally, Act Globally"), as FedLoRA's baseline.

    The feature extractor and representation layer (convs, FC1, FC2) are private; the
    model's head (its declared ``head`` part: FC3, 500 x C in every Table 1 CNN, hence
    homogeneous across CNN-1..5) is the global part: sent down,
    trained with the local layers on CE, averaged with example weights
    (``new = sum_i n_i head_i / sum_i n_i`` over the sampled clients). Deviation: LG-FedAvg
    starts its local layers from a FedAvg-pretrained model; here they start from the fresh
    random initialisation of the client's architecture (there is no global model to
    pretrain in the heterogeneous setting).
    """
    family = "FedLoRA family (personalised)"

    def shared_keys(self) -> list[str]:
        return list(self.ctx.part_keys["head"])

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        return F.cross_entropy(model(batch["x"]), batch["y"])
