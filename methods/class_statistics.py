"""FedLoRA's baselines that exchange per-class statistics instead of model weights
(papers/fedlora_model_heterogeneous.txt, Sec. 6.1): FD (Jeong et al. 2018, per-class mean
logits) and FedProto (Tan et al. 2022, per-class prototypes of the representation). The
family's shared protocol is in :mod:`fedbench.methods.personalised`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods import fedlora_math as fm
from fedbench.methods.aggregation import per_class_average
from fedbench.methods.base import MethodContext
from fedbench.methods.base import EXTRA_PREFIX, ClientUpdate, MethodState, extra_module
from fedbench.methods.personalised import PersonalisedConfig, PersonalisedMethod


class ClassStatistics(nn.Module):
    """Global per-class statistics as frozen tensors: ``means`` (C, D), ``counts`` (C,).

    A module only so that they are part of the global state and of payloads; they are
    never trainable (no local phase lists them)."""

    def __init__(self, n_classes: int, dim: int):
        super().__init__()
        self.means = nn.Parameter(torch.zeros(n_classes, dim), requires_grad=False)  # (C, D)
        self.counts = nn.Parameter(torch.zeros(n_classes), requires_grad=False)  # (C,)


class StatisticsMethod(PersonalisedMethod):
    """Clients upload per-class means of some output (+ counts) as ``client_statistics``;
    the server averages them per class, weighted by the counts
    (:func:`aggregation.per_class_average`), and sends the result down. ``stat_name`` is
    the extra module holding them; ``stat_dim`` their width; ``stat_values`` what is averaged."""

    stat_name: ClassVar[str] = "stats"

    @classmethod
    def stat_dim(cls, ctx: MethodContext) -> int:
        raise NotImplementedError

    def stat_values(self, model, x) -> torch.Tensor:
        raise NotImplementedError

    @classmethod
    def extra_modules(cls, config, ctx, head):
        return {cls.stat_name: ClassStatistics(int(ctx.n_classes), cls.stat_dim(ctx))}

    @property
    def stat_keys(self) -> tuple[str, str]:
        return f"{EXTRA_PREFIX}.{self.stat_name}.means", f"{EXTRA_PREFIX}.{self.stat_name}.counts"

    def down_keys(self) -> list[str]:
        return list(self.stat_keys)

    def global_stats(self, model) -> tuple[torch.Tensor, torch.Tensor]:
        stats = extra_module(model, self.stat_name)
        return stats.means, stats.counts

    def client_statistics(self, task, model, batches, plan):
        """Per-class mean of ``stat_values`` over the client's training split, and counts."""
        n_classes = int(self.ctx.n_classes)
        sums, counts = None, None
        for batch in batches():
            v = self.stat_values(model, batch["x"]).float()  # (B, D)
            m, n = fm.class_means(v, batch["y"], n_classes)
            s = m * n[:, None]
            sums, counts = (s, n) if sums is None else (sums + s, counts + n)
        means = sums / counts.clamp(min=1)[:, None]
        k_means, k_counts = self.stat_keys
        return {k_means: means, k_counts: counts}

    def aggregate(self, state: MethodState, updates: Sequence[ClientUpdate]) -> MethodState:
        k_means, k_counts = self.stat_keys
        ups = [u for u in updates if k_means in u.tensors]
        if not ups:
            return state
        means = torch.stack([u.tensors[k_means].float() for u in ups])  # (K, C, D)
        counts = torch.stack([u.tensors[k_counts].float() for u in ups])  # (K, C)
        glob, total = per_class_average(means, counts)
        tensors = dict(state.tensors)
        tensors[k_means], tensors[k_counts] = glob, total
        return MethodState(tensors=tensors, extra=state.extra)


@dataclass(frozen=True)
class FDConfig(PersonalisedConfig):
    gamma: float = cfg_field(1.0, "weight of the distillation term towards the global per-class logits")
    temperature: float = cfg_field(1.0, "softmax temperature of the distillation (FD: 1)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "gamma", self.gamma >= 0, "must be a number >= 0")
        check(self, "temperature", self.temperature > 0, "must be a number > 0")


@METHODS.register("fd", "FD: federated distillation of per-class mean logits")
class FD(StatisticsMethod):
    """FD, Federated Distillation (Jeong et al. 2018, Alg. 1), as FedLoRA's baseline.

    After local training each client uploads its per-class mean logits (C x C) and class
    counts (:func:`fedlora_math.class_mean_logits`); the server averages each class's
    logits over clients weighted by counts (:func:`aggregation.per_class_average`) and
    sends the global (C x C, C) down. Local loss: ``CE(z, y) + gamma * KL(softmax(g_y / T) ||
    softmax(z / T))`` (:func:`fedlora_math.fd_distill_loss`) over examples whose class has
    a global logit (none in round 1). Deviations: the global logit of a class includes the
    client's own contribution (Alg. 1 leaves it out; here all clients get one broadcast,
    as FedLoRA's baseline implementations do); KL instead of FD's cross-entropy to the
    soft target (same gradient); statistics are computed once after local training, on
    the model that is uploaded.
    """
    family = "FedLoRA family (personalised)"

    config_cls = FDConfig
    stat_name = "fd"

    @classmethod
    def stat_dim(cls, ctx: MethodContext) -> int:
        return int(ctx.n_classes)

    def stat_values(self, model, x):
        return model(x)  # (B, C) logits

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        logits = model(batch["x"])
        g, n = self.global_stats(model)
        loss = F.cross_entropy(logits, batch["y"])
        if self.config.gamma > 0:
            loss = loss + self.config.gamma * fm.fd_distill_loss(logits, batch["y"], g, n, self.config.temperature)
        return loss


@dataclass(frozen=True)
class FedProtoConfig(PersonalisedConfig):
    lam: float = cfg_field(1.0, "FedProto lambda (Eq. 8): weight of the mean squared error (over the 500 dims) "
                                "of a representation to its class's global prototype")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "lam", self.lam >= 0, "must be a number >= 0")


@METHODS.register("fedproto", "FedProto: per-class prototypes of the 500-d representation, averaged per class")
class FedProto(StatisticsMethod):
    """FedProto (Tan et al. 2022, "FedProto: Federated Prototype Learning across
    Heterogeneous Clients"), as FedLoRA's baseline.

    Prototypes = per-class means of the 500-d representation (FC2 output, the same width
    in CNN-1..5); the server's global prototype of class c is the count-weighted mean
    ``sum_k n_kc P_kc / sum_k n_kc`` (:func:`aggregation.per_class_average`). Local loss:
    ``CE(z, y) + lam * MSE(f(x), P_y)`` (the paper's Eq. 8 ``L_S + lam * L_R`` as the authors'
    code computes it: ``nn.MSELoss``, the mean over the batch and the 500 dims, lam = 1, the
    authors' default; :func:`fedlora_math.proto_loss`; 0 for classes without a global
    prototype). Before this, the squared L2 was summed over the 500 dims (500x the
    reference scale). Prediction: the CNN's head (headline, FedLoRA's protocol); the
    nearest-global-prototype accuracy is recorded as ``top1_proto`` (FedProto's own
    inference).
    """
    family = "FedLoRA family (personalised)"

    config_cls = FedProtoConfig
    stat_name = "proto"

    @classmethod
    def stat_dim(cls, ctx: MethodContext) -> int:
        return cls.declared_parts(ctx).width("representation")  # the declared representation's (500 in CNN-1..5)

    def stat_values(self, model, x):
        return self.split(model, x)[1]  # (B, 500) representations

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        _, feats, logits = self.split(model, batch["x"])
        p, n = self.global_stats(model)
        return F.cross_entropy(logits, batch["y"]) + fm.proto_loss(feats, batch["y"], p, n, self.config.lam)

    def eval_logits(self, task, model, batch, hidden):
        _, feats, logits = self.split(model, batch["x"])
        p, n = self.global_stats(model)
        dist = fm.prototype_distances(feats, p, n)  # (B, C)
        # argmax of -dist = nearest_prototype; with no prototype at all every class ties (predicts 0)
        return {"local": logits, "proto": torch.nan_to_num(-dist, neginf=-1e30)}
