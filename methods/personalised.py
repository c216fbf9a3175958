"""Model-heterogeneous personalised FL baselines of FedLoRA (papers/fedlora_model_heterogeneous.txt,
Sec. 6.1): Standalone, LG-FedAvg, FML, FedKD, FD, FedProto, and their shared base
:class:`PersonalisedMethod` (FedLoRA itself is :mod:`fedbench.methods.fedlora`).

Common to all seven (FedLoRA's evaluation protocol, Sec. 6.1):

- every client owns a whole Table 1 CNN (:mod:`fedbench.tasks.cnn`): ``cnn1`` for all
  clients (``archs=cnn1``, model-homogeneous) or CNN-(client mod 5 + 1)
  (``archs=hetero``, model-heterogeneous, the paper's assignment by client id); the task
  must offer these architectures (``needs_archs``: cifar10, fashion_mnist,
  tiny_vision with ``model=cnn``);
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
from typing import Any, ClassVar, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods import fedlora_math as fm
from fedbench.methods.aggregation import per_class_average
from fedbench.methods.base import (
    EXTRA_PREFIX,
    ClientPlan,
    ClientUpdate,
    LocalPhase,
    Method,
    MethodConfig,
    MethodState,
    extra_module,
)
from fedbench.tasks.cnn import ARCHS, FEATURE_DIM, arch_index, cnn

#: parameter names of every Table 1 CNN (the same in CNN-1..5; only shapes differ)
CNN_KEYS: tuple[str, ...] = tuple(n for n, _ in cnn(5, 1, 2, 16).named_parameters())
HEAD_KEYS: tuple[str, ...] = tuple(k for k in CNN_KEYS if k.startswith("head."))


def extra_keys(name: str, keys: Sequence[str]) -> list[str]:
    """The canonical names of extra module ``name``'s tensors among ``keys``."""
    prefix = f"{EXTRA_PREFIX}.{name}."
    return [k for k in keys if k.startswith(prefix)]


# ------------------------------------------------------------------------------- base
@dataclass(frozen=True)
class PersonalisedConfig(MethodConfig):
    lora_targets: str = cfg_field("none", "LoRA target profile; 'none' (the CNN tasks' empty profile): these methods "
                                          "train whole CNNs, no peft LoRA")
    archs: str = cfg_field("hetero", "client models: 'hetero' = CNN-(client mod 5 + 1) (model-heterogeneous, "
                                     "FedLoRA Sec. 6.1), or one of cnn1..cnn5 for every client (model-homogeneous; "
                                     "the paper's is cnn1)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "archs", self.archs == "hetero" or self.archs in ARCHS,
              f"must be 'hetero' or one of {', '.join(ARCHS)}")


class PersonalisedMethod(Method):
    """Base of the FedLoRA family: whole private CNNs, local evaluation, nothing shared
    unless a subclass says so (``shared_keys``). ``private_keys`` = the CNN minus the
    shared keys; one local phase trains the CNN and the shared keys with ``client_loss``."""

    config_cls = PersonalisedConfig
    task_kinds = ("classification",)
    evaluation: ClassVar[str] = "local"
    needs_archs: ClassVar[tuple[str, ...]] = ARCHS

    # -- architecture ---------------------------------------------------------------------
    def client_arch(self, client: int) -> str:
        if self.config.archs == "hetero":
            return f"cnn{client % 5 + 1}"
        return self.config.archs

    def plan(self, rnd, clients, state, rng):
        return {p.client: ClientPlan(p.client, p.tier, (), train_head=False, arch=self.client_arch(p.client))
                for p in clients}

    # -- what lives where ----------------------------------------------------------------
    def shared_keys(self) -> list[str]:
        """Model tensors the server averages (sent down, trained, sent up). Default: none."""
        return []

    def down_keys(self) -> list[str]:
        """Tensors sent down: the shared ones (+ global statistics, subclasses)."""
        return self.shared_keys()

    def private_keys(self, plan: ClientPlan) -> list[str]:
        shared = set(self.shared_keys())
        return [k for k in CNN_KEYS if k not in shared]

    def model_keys(self, plan: ClientPlan) -> list[str]:
        return list(CNN_KEYS) + [k for k in self.down_keys() if k not in CNN_KEYS]

    def client_payload(self, state: MethodState, plan: ClientPlan) -> dict[str, torch.Tensor]:
        return {k: state.tensors[k] for k in self.down_keys()}

    def upload_keys(self, plan: ClientPlan) -> list[str]:
        return self.shared_keys()

    def local_phases(self, plan: ClientPlan) -> tuple[LocalPhase, ...]:
        trainable = list(CNN_KEYS) + [k for k in self.shared_keys() if k not in CNN_KEYS]
        return (LocalPhase("train", tuple(trainable)),)

    # -- the CNN's parts -------------------------------------------------------------------
    @staticmethod
    def parts(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(FC1 output (B, fc1), representation (B, 500), logits (B, C)) of a Table 1 CNN."""
        h1 = model.fc[0](model.convs(x))
        feats = model.fc[1](h1)
        return h1, feats, model.head(feats)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "needs_archs": list(self.needs_archs)}


# -------------------------------------------------------------------------- standalone
@METHODS.register("standalone", "each client trains its own CNN on its own data; nothing is exchanged "
                                "(lower reference of FedLoRA Sec. 6)")
class Standalone(PersonalisedMethod):
    """Standalone: local training only (FedLoRA's lower reference, Sec. 6.1).

    Each client trains its private CNN with cross-entropy on its local training split
    whenever it is sampled; payloads and uploads are empty (0 bytes both ways) and the
    server does nothing. No deviation.
    """

    communicates: ClassVar[bool] = False

    def aggregate(self, state: MethodState, updates: Sequence[ClientUpdate]) -> MethodState:
        return state

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        return F.cross_entropy(model(batch["x"]), batch["y"])


# --------------------------------------------------------------------------- LG-FedAvg
@METHODS.register("lg_fedavg", "LG-FedAvg: private representation layers, shared classifier averaged")
class LGFedAvg(PersonalisedMethod):
    """LG-FedAvg (Liang et al. 2020, "Think Locally, Act Globally"), as FedLoRA's baseline.

    The representation (convs, FC1, FC2) is private; the classifier FC3 (``head``, 500 x C
    in every Table 1 CNN, hence homogeneous across CNN-1..5) is the global part: sent down,
    trained with the local layers on CE, averaged with example weights
    (``new = sum_i n_i head_i / sum_i n_i`` over the sampled clients). Deviation: LG-FedAvg
    starts its local layers from a FedAvg-pretrained model; here they start from the fresh
    random initialisation of the client's architecture (there is no global model to
    pretrain in the heterogeneous setting).
    """

    def shared_keys(self) -> list[str]:
        return list(HEAD_KEYS)

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        return F.cross_entropy(model(batch["x"]), batch["y"])


# --------------------------------------------------------------------- FML and FedKD
@dataclass(frozen=True)
class SharedModelConfig(PersonalisedConfig):
    shared_arch: str = cfg_field("cnn5", "architecture of the small shared homogeneous model (FedLoRA's baselines "
                                         "use the smallest, CNN-5)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "shared_arch", self.shared_arch in ARCHS, f"must be one of {', '.join(ARCHS)}")


class SharedModelMethod(PersonalisedMethod):
    """A small shared CNN (extra module ``shared``) trained together with the private CNN;
    only the shared model is averaged (example weights)."""

    config_cls = SharedModelConfig

    def extra_modules(self, head):
        info = self.ctx.data_info
        return {"shared": cnn(arch_index(self.config.shared_arch), int(info.get("in_channels", 3)),
                              int(self.ctx.n_classes), int(info.get("img_size", 32)))}

    def shared_keys(self) -> list[str]:
        return extra_keys("shared", self.ctx.extra_keys)

    def two_outputs(self, model, x):
        _, f_local, z_local = self.parts(model, x)
        _, f_shared, z_shared = self.parts(extra_module(model, "shared"), x)
        return f_local, z_local, f_shared, z_shared

    def eval_logits(self, task, model, batch, hidden):
        """Headline: the private CNN (FedLoRA evaluates each client's local model); also
        the shared model's accuracy (``top1_shared``)."""
        _, z_local, _, z_shared = self.two_outputs(model, batch["x"])
        return {"local": z_local, "shared": z_shared}


@dataclass(frozen=True)
class FMLConfig(SharedModelConfig):
    alpha: float = cfg_field(0.5, "FML alpha: weight of CE in the private model's loss (1 - alpha on its KL to "
                                  "the shared model)")
    beta: float = cfg_field(0.5, "FML beta: weight of CE in the shared (meme) model's loss (1 - beta on its KL to "
                                 "the private model)")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("alpha", "beta"):
            check(self, name, 0.0 <= getattr(self, name) <= 1.0, "must be in [0, 1]")


@METHODS.register("fml", "FML: deep mutual learning of the private CNN and a small shared CNN (averaged)")
class FML(SharedModelMethod):
    """FML, Federated Mutual Learning (Shen et al. 2020), as FedLoRA's baseline.

    Each client trains its private CNN and the shared "meme" model (CNN-5 by default) on
    the same batches with deep mutual learning (:func:`fedlora_math.fml_losses`):
    ``L_local = alpha CE(local) + (1 - alpha) KL(p_meme || p_local)``,
    ``L_meme = beta CE(meme) + (1 - beta) KL(p_local || p_meme)``, each KL with the other
    model's prediction held constant; one optimizer step on ``L_local + L_meme`` (the two
    losses touch disjoint parameters, so this is FML's two simultaneous updates). Only
    the meme model is averaged (example weights). Deviation: one optimizer and learning
    rate for both models.
    """

    config_cls = FMLConfig

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        _, z_local, _, z_shared = self.two_outputs(model, batch["x"])
        l_local, l_meme = fm.fml_losses(z_local, z_shared, batch["y"], self.config.alpha, self.config.beta)
        return l_local + l_meme


@dataclass(frozen=True)
class FedKDConfig(SharedModelConfig):
    hidden_loss: bool = cfg_field(True, "add FedKD's hidden-state distillation (MSE between the two models' 500-d "
                                        "representations, weighted like the output distillation)")


@METHODS.register("fedkd", "FedKD: adaptive mutual distillation of the private CNN (teacher) and a small "
                           "shared CNN (student, averaged)")
class FedKD(SharedModelMethod):
    """FedKD (Wu et al. 2022, "Communication-efficient federated learning via knowledge
    distillation"), as FedLoRA's baseline.

    Private CNN = teacher, shared CNN-5 = student (:func:`fedlora_math.fedkd_losses`):
    ``w = 1 / (CE_t + CE_s)`` (constant per batch), ``L_t = CE_t + w KL(p_s || p_t)
    [+ w MSE(H_t, H_s)]``, ``L_s = CE_s + w KL(p_t || p_s) [+ w MSE(H_s, H_t)]``, hidden
    states H = the 500-d representation (FC2 output) both models have, so no projection is
    needed; one step on ``L_t + L_s``. Only the student is averaged (example weights).
    Deviations: no SVD compression of the uploaded student (FedKD's energy-thresholded
    SVD, :func:`fedlora_math.svd_compress`, is not applied: uploads are the full student);
    one optimizer for both models.
    """

    config_cls = FedKDConfig

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        f_t, z_t, f_s, z_s = self.two_outputs(model, batch["x"])
        hid = self.config.hidden_loss
        l_t, l_s = fm.fedkd_losses(z_t, z_s, batch["y"], f_t if hid else None, f_s if hid else None)
        return l_t + l_s


# --------------------------------------------------------------------- FD and FedProto
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

    def stat_dim(self) -> int:
        raise NotImplementedError

    def stat_values(self, model, x) -> torch.Tensor:
        raise NotImplementedError

    def extra_modules(self, head):
        return {self.stat_name: ClassStatistics(int(self.ctx.n_classes), self.stat_dim())}

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

    config_cls = FDConfig
    stat_name = "fd"

    def stat_dim(self) -> int:
        return int(self.ctx.n_classes)

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
    lam: float = cfg_field(1.0, "FedProto lambda: weight of the squared L2 distance of a representation to its "
                                "class's global prototype")

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
    ``CE(z, y) + lam * mean_b ||f(x_b) - P_{y_b}||^2`` (:func:`fedlora_math.proto_loss`,
    squared L2 summed over dims; 0 for classes without a global prototype). Prediction:
    the CNN's head (headline, FedLoRA's protocol); the nearest-global-prototype accuracy
    is recorded as ``top1_proto`` (FedProto's own inference). Deviation: the L2 is summed
    over the 500 dims (PFLlib's MSE averages it).
    """

    config_cls = FedProtoConfig
    stat_name = "proto"

    def stat_dim(self) -> int:
        return FEATURE_DIM

    def stat_values(self, model, x):
        return self.parts(model, x)[1]  # (B, 500) representations

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        _, feats, logits = self.parts(model, batch["x"])
        p, n = self.global_stats(model)
        return F.cross_entropy(logits, batch["y"]) + fm.proto_loss(feats, batch["y"], p, n, self.config.lam)

    def eval_logits(self, task, model, batch, hidden):
        _, feats, logits = self.parts(model, batch["x"])
        p, n = self.global_stats(model)
        dist = torch.cdist(feats, p).pow(2).masked_fill(n[None, :] <= 0, float("inf"))  # (B, C)
        # argmax of -dist = nearest_prototype; with no prototype at all every class ties (predicts 0)
        return {"local": logits, "proto": torch.nan_to_num(-dist, neginf=-1e30)}
