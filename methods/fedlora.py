"""FedLoRA (papers/fedlora_model_heterogeneous.txt): model-heterogeneous personalised FL
with a small homogeneous low-rank adapter per client.

Implemented (Sec. 4):

- every client owns a whole Table 1 CNN (private, kept between rounds) and a copy of one
  homogeneous adapter (extra module ``adapter``), the only thing that travels;
- the adapter (Sec. 4.3, ``adapter`` field): *direct dimension reduction*
  (:class:`fedlora_math.DirectReductionAdapter`: FC1 output (the output of the model's
  declared feature extractor) -> rank -> ReLU -> C, the reduced copy of FC2 + FC3;
  model-homogeneous setting only, since its input width is the FC1 width) or *matrix
  decomposition* (:class:`fedlora_math.MatrixDecompositionAdapter`: the 500-d
  representation (the declared representation layer's output) -> rank -> C with no
  non-linearity, the factorised FC3; works for CNN-1..5 alike). ``auto`` picks the paper's choice: direct for a homogeneous
  federation, decomposition for ``archs=hetero``;
- each round, on the received global adapter (Sec. 4.1, iterative learning):
  phase ``local`` (Eq. 5-6): adapter frozen, the local CNN trained on
  ``mu * CE(local(x), y) + (1 - mu) * CE(adapter(h(x)), y)``, the adapter's CE reaching the
  CNN's layers below the adapter's input through ``h``;
  phase ``adapter`` (Eq. 7-8): CNN frozen, the adapter trained on ``CE(adapter(h(x)), y)``;
- only the adapter goes up; the server averages the adapters with example weights
  (Eq. 10, ``new = sum_i n_i theta_i / sum_i n_i`` over the sampled clients);
- evaluation: "each client's personalized heterogeneous local model is used for
  inference" (Sec. 4.1, end): the headline is the local CNN's own output (``local``); the
  adapter branch's accuracy on the same split is recorded as ``top1_adapter``.

The rank (``rank``, the paper's d_1): Sec. 4.3 builds the decomposition adapter by
factorising FC3's 500 x C matrix into 500 x d_1 and d_1 x C, a low-rank factorisation only
when d_1 < C, and the adapter is "a low-rank version" of the local model (Sec. 1, 4.3).
The numeric d_1 of Sec. 6 / Fig. 11 did not survive in our copy of the text (its math is
stripped), so the default is half the class count (:func:`default_rank`: 5 for CIFAR-10
and Fashion-MNIST, 50 for CIFAR-100), below C for both adapter structures. Before this the
default was 50 for every task: rank 50 with 10 classes is not low rank.

Deviations: the paper's tuned mu, epochs and learning rates are not in our text;
defaults are mu 0.9 (Fig. 11: accuracy grows with mu); the two phases use the
run's optimizer, learning rate and ``local_epochs`` each (``adapter_epochs`` overrides the
second phase's), with a fresh optimizer per phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from torch.nn import functional as F

from fedbench.config import cfg_field, check
from fedbench.methods import METHODS
from fedbench.methods import fedlora_math as fm
from fedbench.methods.base import ClientPlan, LocalPhase, extra_module
from fedbench.methods.personalised import PersonalisedConfig, PersonalisedMethod, extra_keys

ADAPTERS = ("auto", "direct", "decomposition")


def default_rank(n_classes: int) -> int:
    """The adapter rank when none is configured: half the class count, at least 1 (below
    the class count for any C >= 2, so the factorised 500 x C FC3 is genuinely low rank)."""
    return max(1, n_classes // 2)


@dataclass(frozen=True)
class FedLoRAConfig(PersonalisedConfig):
    adapter: str = cfg_field("auto", "adapter structure (Sec. 4.3): 'direct' (direct dimension reduction of FC2+FC3, "
                                     "homogeneous federations only), 'decomposition' (matrix decomposition of FC3), "
                                     "'auto' = direct when archs is one CNN, decomposition when archs=hetero")
    rank: int | None = cfg_field(None, "width of the adapter's first layer (the paper's d_1, its low rank); "
                                       "None = half the class count (below it, as a low rank must be)")
    mu: float = cfg_field(0.9, "Eq. 5 weight of the local model's CE (1 - mu on the frozen adapter's CE)")
    adapter_epochs: int | None = cfg_field(None, "epochs of phase 2 (adapter training); None = run.local_epochs")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "adapter", self.adapter in ADAPTERS, f"must be one of {', '.join(ADAPTERS)}")
        check(self, "adapter", not (self.adapter == "direct" and self.archs == "hetero"),
              "'direct' needs one FC1 width for all clients: use it with archs=cnn1..cnn5, or 'decomposition'")
        check(self, "rank", self.rank is None or self.rank >= 1, "must be an integer >= 1 (or none)")
        check(self, "mu", 0.0 <= self.mu <= 1.0, "must be in [0, 1]")
        check(self, "adapter_epochs", self.adapter_epochs is None or self.adapter_epochs >= 1,
              "must be an integer >= 1 (or none)")

    @property
    def structure(self) -> str:
        if self.adapter != "auto":
            return self.adapter
        return "decomposition" if self.archs == "hetero" else "direct"


@METHODS.register("fedlora", "FedLoRA: private heterogeneous CNNs + one small homogeneous low-rank adapter, "
                             "iterative two-phase training, only adapters averaged")
class FedLoRA(PersonalisedMethod):
    """FedLoRA (papers/fedlora_model_heterogeneous.txt): Eq. 5 (phase ``local``), Eq. 8
    (phase ``adapter``), Eq. 10 (example-weighted adapter average); the module docstring
    lists the adapter structures, the evaluated output and every deviation."""
    family = "FedLoRA family (personalised)"

    config_cls = FedLoRAConfig

    @classmethod
    def extra_modules(cls, config, ctx, head):
        cfg, c = config, int(ctx.n_classes)
        rank = default_rank(c) if cfg.rank is None else cfg.rank
        parts = cls.declared_parts(ctx)
        if cfg.structure == "direct":  # h's width in the one architecture every client has (its FC1's)
            return {"adapter": fm.DirectReductionAdapter(ctx.parts_of(cfg.archs).width("feature_extractor"), rank, c)}
        # r's width, the same in every architecture of the family (the 500-d FC2 output)
        return {"adapter": fm.MatrixDecompositionAdapter(parts.width("representation"), rank, c)}

    def shared_keys(self) -> list[str]:
        return extra_keys("adapter", self.ctx.extra_keys)

    def local_phases(self, plan: ClientPlan) -> tuple[LocalPhase, ...]:
        return (LocalPhase("local", tuple(self.own_keys())),
                LocalPhase("adapter", tuple(self.shared_keys()), self.config.adapter_epochs))

    def outputs(self, model, x):
        """(local logits, adapter logits) for a batch of images."""
        h, r, z_local = self.split(model, x)
        return z_local, extra_module(model, "adapter")(h if self.config.structure == "direct" else r)

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        x, y = batch["x"], batch["y"]
        if phase == "adapter":  # Eq. 8: the frozen CNN only provides the adapter's input; no head forward
            h = self.ctx.parts.run(model, "feature_extractor", x)
            if self.config.structure != "direct":
                h = self.ctx.parts.run(model, "representation", h)
            return F.cross_entropy(extra_module(model, "adapter")(h), y)
        z_local, z_adapter = self.outputs(model, x)
        return fm.fedlora_local_loss(z_local, z_adapter, y, self.config.mu)  # Eq. 5

    def eval_logits(self, task, model, batch, hidden):
        z_local, z_adapter = self.outputs(model, batch["x"])
        return {"local": z_local, "adapter": z_adapter}
