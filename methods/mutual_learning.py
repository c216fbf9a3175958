"""FedLoRA's baselines with a small shared model trained by mutual distillation
(papers/fedlora_model_heterogeneous.txt, Sec. 6.1): FML (Shen et al. 2020) and FedKD (Wu
et al. 2022). The family's shared protocol is in :mod:`fedbench.methods.personalised`."""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods import fedlora_math as fm
from fedbench.methods.base import extra_module
from fedbench.methods.personalised import PersonalisedConfig, PersonalisedMethod, check_arch, extra_keys


@dataclass(frozen=True)
class SharedModelConfig(PersonalisedConfig):
    shared_arch: str = cfg_field("cnn5", "architecture of the small shared homogeneous model, one of the task's "
                                         "(FedLoRA's baselines use the smallest, CNN-5)")


class SharedModelMethod(PersonalisedMethod):
    """A small shared model (extra module ``shared``: the task's model of architecture
    ``shared_arch``, built at the data's shape and split by its own declared parts) trained
    together with the private CNN; only the shared model is averaged (example weights)."""

    config_cls = SharedModelConfig

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        check_arch("shared_arch", config.shared_arch, ctx.archs)
        self.shared_parts = ctx.parts_of(config.shared_arch)

    @classmethod
    def extra_modules(cls, config, ctx, head):
        cls.declared_parts(ctx)
        check_arch("shared_arch", config.shared_arch, ctx.archs)
        return {"shared": ctx.model_of(config.shared_arch).model}

    def shared_keys(self) -> list[str]:
        return extra_keys("shared", self.ctx.extra_keys)

    def two_outputs(self, model, x):
        """(representation, logits) of the private model, then of the shared one."""
        _, f_local, z_local = self.split(model, x)
        _, f_shared, z_shared = self.shared_parts.forward(extra_module(model, "shared"), x)
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
    family = "FedLoRA family (personalised)"

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
    family = "FedLoRA family (personalised)"

    config_cls = FedKDConfig

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        f_t, z_t, f_s, z_s = self.two_outputs(model, batch["x"])
        hid = self.config.hidden_loss
        l_t, l_s = fm.fedkd_losses(z_t, z_s, batch["y"], f_t if hid else None, f_s if hid else None)
        return l_t + l_s
