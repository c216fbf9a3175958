"""Task interface: data (+ offline path), model with a layer map, loss and evaluation.

A task returns a :class:`ModelBundle` from ``build_model()``: the model, the dotted path of
its container of blocks, and per LoRA *target profile* the module-name suffixes inside a
block (e.g. ``{"proj_fc2": ["attn.proj", "mlp.fc2"], "qv": ["attn.qkv"]}``). The layer map
``block index -> module names`` follows from these, so methods never spell state-dict
keys. A classifier that methods may split declares its :class:`ModelParts` (feature
extractor, representation layer, head) in the bundle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from fedbench.config import FieldError, check
from fedbench.configs import TaskConfig  # noqa: F401 - the base of every task config, re-exported

log = logging.getLogger(__name__)


#: LoRA target profiles under their old names -> their names now. Configs and records
#: written before a rename keep working (a record keeps the name it was run with):
#: ``fedra`` named a method; the profile is what it targets, the attention output
#: projection + the MLP's second linear.
PROFILE_ALIASES: dict[str, str] = {"fedra": "proj_fc2"}

#: the parts of :class:`ModelParts`, in forward order
PART_NAMES: tuple[str, ...] = ("feature_extractor", "representation", "head")


@dataclass(frozen=True)
class ModelParts:
    """Which modules of a classifier form its feature extractor, its representation layer
    and its head, as module paths in forward order: x -> ``feature_extractor`` -> h ->
    ``representation`` -> r -> ``head`` -> logits, each part running its modules one after
    another (the model's forward must be this chain). Methods that split a model use it
    instead of naming layers: FedLoRA's adapters read h or r, FedProto's prototypes are
    means of r, LG-FedAvg shares the head (the FedLoRA family, methods/personalised.py)."""

    feature_extractor: tuple[str, ...]
    representation: tuple[str, ...]
    head: tuple[str, ...]
    #: the widths of h and r (the feature extractor's and the representation's outputs), as
    #: the model declares them (what a method sizes a module reading h or r by); () = undeclared
    widths: tuple[int, ...] = ()

    def width(self, part: str) -> int:
        """The declared output width of ``part`` (``feature_extractor`` or ``representation``)."""
        if len(self.widths) != 2:
            raise ValueError(f"this model's parts declare no widths (a method sizes a module by the {part}'s)")
        return self.widths[PART_NAMES.index(part)]

    def modules(self, part: str) -> tuple[str, ...]:
        """The module paths of ``part`` (one of :data:`PART_NAMES`)."""
        return {"feature_extractor": self.feature_extractor, "representation": self.representation,
                "head": self.head}[part]

    def run(self, model: nn.Module, part: str, x: torch.Tensor) -> torch.Tensor:
        """``part`` of ``model`` applied to ``x`` (its modules in order)."""
        for path in self.modules(part):
            x = model.get_submodule(path)(x)
        return x

    def forward(self, model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(h, r, logits): the feature extractor's output, the representation, the head's output."""
        h = self.run(model, "feature_extractor", x)
        r = self.run(model, "representation", h)
        return h, r, self.run(model, "head", r)


def check_model_limit(field: str, value: int, limit: int, what: str) -> None:
    """Once a model (or its tokenizer) is loaded: ``task.<field>`` = ``value`` must be at most
    the ``limit`` that ``what`` holds (e.g. its position embeddings); else a one-line
    :class:`~fedbench.config.FieldError` naming the field."""
    if value > limit:
        raise FieldError(f"task.{field}", value, f"{what} holds at most {limit} tokens")


def check_fraction(cfg: Any, name: str) -> None:
    """In a config's ``__post_init__``: field ``name`` must be a number strictly between 0 and 1."""
    check(cfg, name, 0.0 < getattr(cfg, name) < 1.0, "must be a number in (0, 1), both ends excluded")


@dataclass
class ModelBundle:
    model: nn.Module
    blocks_path: str  # dotted attribute path of the nn.Sequential / nn.ModuleList of blocks
    lora_targets: dict[str, list[str]]  # profile -> module suffixes inside one block
    head_modules: list[str]  # modules every client trains and the server averages
    default_target: str = "default"
    #: the model's parts (feature extractor, representation, head); None = the model does not
    #: declare them, and methods that split a model (the FedLoRA family) refuse it
    parts: ModelParts | None = None

    def blocks(self) -> nn.Module:
        return get_submodule(self.model, self.blocks_path)

    @property
    def n_layers(self) -> int:
        return len(self.blocks())

    def layer_map(self, profile: str) -> dict[int, list[str]]:
        """Block index -> full names of the modules that get LoRA (``default`` = the
        model's default profile; an old name in :data:`PROFILE_ALIASES` = its new name)."""
        if profile == "default":
            profile = self.default_target
        if profile in PROFILE_ALIASES:
            log.warning("LoRA target profile %r is deprecated; it is now called %r", profile,
                        PROFILE_ALIASES[profile])
            profile = PROFILE_ALIASES[profile]
        if profile not in self.lora_targets:
            from fedbench.errors import UserError

            raise UserError(
                f"LoRA target profile {profile!r} not declared by this model (has: {', '.join(sorted(self.lora_targets))})"
            )
        sfx = self.lora_targets[profile]
        return {j: [f"{self.blocks_path}.{j}.{s}" for s in sfx] for j in range(self.n_layers)}


@torch.no_grad()
def init_like(module: nn.Module, template: nn.Module) -> None:
    """Draw every parameter of ``module`` from a normal with the mean and std of the same
    parameter of ``template`` (a freshly initialised head: same structure); a constant
    template parameter (zero biases, a zero-initialised head) is copied."""
    ref = dict(template.named_parameters())
    for name, p in module.named_parameters():
        t = ref[name].detach().float()
        std = float(t.std()) if t.numel() > 1 else 0.0
        if std > 0:
            p.normal_(float(t.mean()), std)
        else:
            p.copy_(t.to(p.dtype))


def get_submodule(model: nn.Module, path: str) -> nn.Module:
    return model.get_submodule(path) if path else model


@dataclass
class ArrayDataset:
    """In-memory dataset of aligned tensors (dict of name -> tensor with equal first dim).

    ``batch(idx)`` slices every tensor at once, which keeps the simulator's overhead low.
    """

    tensors: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return len(next(iter(self.tensors.values())))

    def batch(self, idx: torch.Tensor | np.ndarray | Sequence[int]) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
        return {k: v[idx] for k, v in self.tensors.items()}

    def subset(self, idx) -> "ArrayDataset":
        return ArrayDataset(self.batch(idx))


@dataclass
class TaskData:
    train: Any  # ArrayDataset or a torch Dataset of dict examples
    test: Any
    train_labels: np.ndarray  # label (or category) per train example, for partitioning
    n_classes: int
    train_domains: np.ndarray | None = None
    test_domains: np.ndarray | None = None
    domain_names: list[str] | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalResult:
    metric_name: str
    value: float
    per_domain: dict[str, float] | None = None
    extra: dict[str, float] = field(default_factory=dict)
    #: local evaluation: the scores of the clients that never trained (kept out of ``value``)
    untrained_clients: dict[int, float] = field(default_factory=dict)


def subset(dataset: Any, idx: np.ndarray) -> Any:
    """The examples of ``dataset`` at ``idx``: its own ``subset`` (ArrayDataset and the task
    datasets keep their extras) or a ``torch.utils.data.Subset``."""
    if hasattr(dataset, "subset"):
        return dataset.subset(idx)
    return torch.utils.data.Subset(dataset, [int(i) for i in idx])


def iterate_batches(dataset: Any, indices: np.ndarray, batch_size: int, collate=None) -> Iterator[dict]:
    """Yield batches of ``dataset`` at ``indices`` (in the given order)."""
    for s in range(0, len(indices), batch_size):
        idx = indices[s : s + batch_size]
        if hasattr(dataset, "batch"):
            yield dataset.batch(idx)
        else:
            yield (collate or torch.utils.data.default_collate)([dataset[int(i)] for i in idx])


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


@dataclass(frozen=True)
class RunDefaults:
    """A task's paper setting for the run fields a user leaves unset (``None`` in
    :class:`~fedbench.configs.RunConfig`); :func:`~fedbench.runners.core.spec.build_spec` fills
    them in."""

    clients: int = 10
    batch_size: int = 32
    optimizer: str = "adamw"
    lr: float = 1e-3


class Task:
    """Base class. Subclasses set ``config_cls`` and ``kind`` and implement the methods."""

    config_cls: type[TaskConfig] = TaskConfig
    kind: str = "classification"  # or "generation"
    #: tiny tasks run anywhere; real tasks need data/models
    tiny: bool = False
    #: test examples the server holds out (Fed-HeLLo Sec. IV-A: its FIM proxy set, "excluded
    #: throughout the entire process"); held out in EVERY run, whatever the method, so all
    #: methods are scored on the same examples. ``run.server_holdout`` overrides it.
    server_holdout: int = 50
    #: run-config defaults of the task's paper setting (optimizer, lr, batch_size, clients)
    run_defaults: ClassVar[RunDefaults] = RunDefaults()
    #: name of the task's headline metric (what ``evaluate`` reports)
    metric_name: ClassVar[str] = "top1"
    #: named sizes of the task for a machine (``fedbench run --profile cpu``): per profile, the
    #: ``run`` and ``task`` field values it fills in where the user set none (flags, --set and
    #: --config win); the run is the run of those values, its id the same as when they are
    #: given by hand. Empty: the task has none.
    profiles: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {}

    def __init__(self, config: TaskConfig):
        self.config = config

    def load(self) -> TaskData:
        """Read and encode the data. Whatever ``build_model`` and ``evaluate`` need from
        the data (a tokenizer, label names) goes into the returned ``TaskData``."""
        raise NotImplementedError

    def archs(self) -> tuple[str, ...]:
        """Architectures this task can build (per-client models); the first is the default."""
        return ("default",)

    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        """A fresh model of ``arch`` (None = the default) for ``data``. Stateless: it uses
        only its arguments and the config. Random parts are drawn from the global torch
        RNG, which the runner seeds from the run seed; a random-init backbone that stands
        for pretrained weights is drawn from a fixed seed instead (``fixed_init``)."""
        raise NotImplementedError

    def collate(self, examples: list[dict]) -> dict:
        return torch.utils.data.default_collate(examples)

    def init_head(self, module: nn.Module, template: nn.Module) -> None:
        """Initialise ``module``, a new classifier shaped like the task's head ``template``
        (e.g. DepthFL's early exits), in place, exactly as the task initialises its head.
        Called under the run's seeded RNG. Default: :func:`init_like` (each parameter drawn
        with the initial mean and std of the template's; constants copied). Override where
        the task knows its scheme."""
        init_like(module, template)

    def loss(self, model: nn.Module, batch: dict) -> tuple[torch.Tensor, Any]:
        """Mean training loss over the batch, and the raw outputs (for method loss terms)."""
        raise NotImplementedError

    @classmethod
    def plain_loss(cls) -> bool:
        """Whether the training loss is the mean cross-entropy of ``forward``'s logits against
        ``batch["y"]`` (:class:`ClassificationTask`'s own ``loss``): what lets the ``packed``
        executor compute several clients' losses from one shared forward. Derived, not declared."""
        return False

    @torch.no_grad()
    def evaluate(self, model: nn.Module, dataset: Any, device: torch.device, domains: np.ndarray | None = None,
                 domain_names: list[str] | None = None) -> EvalResult:
        raise NotImplementedError


class ClassificationTask(Task):
    """Shared loss/evaluation for tasks whose batches are ``{"x"| model inputs..., "y"}``."""

    kind = "classification"
    metric_name = "top1"

    def forward(self, model: nn.Module, batch: dict) -> torch.Tensor:
        """Logits (B, n_classes)."""
        raise NotImplementedError

    def loss(self, model, batch):
        logits = self.forward(model, batch)
        return nn.functional.cross_entropy(logits, batch["y"]), logits

    @classmethod
    def plain_loss(cls) -> bool:
        """True unless a subclass between ``cls`` and this class defines its own ``loss``."""
        return not any("loss" in vars(k) for k in cls.__mro__[:cls.__mro__.index(ClassificationTask)])

    def features(self, model: nn.Module, hidden: torch.Tensor, batch: dict) -> torch.Tensor:
        """What a classifier head takes, computed from one block's output ``hidden``.

        Used by methods that put extra classifiers after intermediate blocks (DepthFL).
        Default: the mean over tokens of a (B, T, D) output, (B, D). Tasks override it to
        follow their own forward (final norm, pooling, masks).
        """
        return hidden.mean(dim=1) if hidden.dim() == 3 else hidden

    @torch.no_grad()
    def predict(self, model, dataset, device, indices: np.ndarray, logits_fn=None):
        """Predicted labels {name: labels} and true labels. ``logits_fn(model, batch)``
        may return named logits ({name: (B, C)}); where it is absent or returns None the
        model's own forward gives the single output named ``""``."""
        preds: dict[str, list] = {}
        ys = []
        for batch in iterate_batches(dataset, indices, self.config.eval_batch_size, self.collate):
            batch = to_device(batch, device)
            out = None if logits_fn is None else logits_fn(model, batch)
            if out is None:
                out = {"": self.forward(model, batch)}
            for name, logits in out.items():
                preds.setdefault(name, []).append(logits.argmax(-1).cpu())
            ys.append(batch["y"].cpu())
        y = torch.cat(ys).numpy()
        return {name: torch.cat(p).numpy() for name, p in preds.items()}, y

    @torch.no_grad()
    def evaluate(self, model, dataset, device, domains=None, domain_names=None, logits_fn=None):
        """The task metric; with named outputs (``logits_fn``) the first output is the
        headline and each output's metric is in ``extra`` as ``<metric>_<name>``."""
        idx = eval_indices(len(dataset), self.config.eval_max_examples)
        doms = None if domains is None else domains[idx]
        pred, y = self.predict(model, dataset, device, idx, logits_fn)
        if list(pred) == [""]:
            return classification_result(self.metric_name, pred[""], y, doms, domain_names)
        results = {name: classification_result(self.metric_name, p, y, doms, domain_names) for name, p in pred.items()}
        head = results[next(iter(results))]
        head.extra.update({f"{self.metric_name}_{name}": r.value for name, r in results.items()})
        return head


def eval_indices(n: int, max_examples: int | None) -> np.ndarray:
    """The first ``max_examples`` test examples in a fixed seeded order (all when None)."""
    idx = np.arange(n)
    if max_examples is not None and max_examples < n:
        idx = np.sort(np.random.default_rng(12345).permutation(n)[:max_examples])
    return idx


def classification_result(metric_name: str, pred: np.ndarray, y: np.ndarray, domains: np.ndarray | None,
                          domain_names: list[str] | None) -> EvalResult:
    """top1 (or macro-F1 with micro-F1 as extra), with a per-domain breakdown if domains given."""
    from sklearn.metrics import f1_score

    def score(p, t):
        if metric_name == "macro_f1":
            return float(f1_score(t, p, average="macro", zero_division=0))
        return float((p == t).mean()) if len(t) else float("nan")

    extra = {}
    if metric_name == "macro_f1":
        extra["micro_f1"] = float(f1_score(y, pred, average="micro", zero_division=0))
        extra["top1"] = float((pred == y).mean())
    per_domain = None
    if domains is not None:
        names = domain_names or [str(d) for d in range(int(domains.max()) + 1)]
        per_domain = {names[d]: score(pred[domains == d], y[domains == d]) for d in np.unique(domains)}
        extra["domain_mean"] = float(np.mean(list(per_domain.values())))
    return EvalResult(metric_name, score(pred, y), per_domain, extra)
