"""Tiny built-in tasks: made-up data, tiny random-init models, CPU, seconds, no download.

- ``tiny_vision`` (:mod:`fedbench.tasks.tiny_vision`): class-structured images in six
  visual domains (like DomainNet/NICO++); a 12-block tiny timm ViT (``model=vit``,
  default) or MLP-Mixer (``model=mixer``), or FedLoRA's Table 1 CNNs (``model=cnn``:
  per-client architectures cnn1..cnn5).
- ``tiny_text`` (here): token-sequence classification (class keywords among filler
  tokens); a tiny 12-layer BERT built from a transformers config.
- ``tiny_lm`` (:mod:`fedbench.tasks.tiny_lm`): made-up instruction -> response pairs; a
  tiny 12-layer Llama-style causal LM; Rouge-L (rouge-score) of greedy generations.

Each is built so that a few rounds of FedAvg clearly beat chance: tests check learning,
not just that code ran. Data are generated from a fixed data seed (``data_seed``), so
every run sees the same examples whatever its run seed. This module also holds the
config checks the three share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from fedbench.config import cfg_field, check, check_int
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import ArrayDataset, ClassificationTask, ModelBundle, RunDefaults, Task, TaskConfig, TaskData
from fedbench.tasks.models import fixed_init


def check_arch(task: Task, arch: str | None) -> None:
    if arch is not None and arch not in task.archs():
        raise UserError(f"{type(task).__name__}: unknown architecture {arch!r} (has: {', '.join(task.archs())})")


#: limits of a tiny task (they are meant to run in seconds on a CPU): its made-up data
#: (train + test, as the task holds them) and its model
TINY_DATA_BYTES = 2 * 2**30
MAX_DEPTH, MAX_WIDTH, MAX_CLASSES = 48, 1024, 1000
MAX_SEQUENCES, MAX_SEQ_LEN, MAX_VOCAB = 1_000_000, 512, 100_000  # tiny_text


def check_tiny(cfg: TaskConfig, task: str, model_names: tuple[str, ...], model_hint: str) -> None:
    """What every tiny task config refuses: a data directory, a model that is not its own,
    a negative data seed, a depth outside ``1..MAX_DEPTH``. Called after the base checks."""
    if cfg.data_dir is not None:
        raise UserError(f"{task} takes no --data-dir (its data are generated); got {cfg.data_dir!r}")
    if model_names:
        check(cfg, "model", cfg.model in model_names, f"{task} builds its own model; choose from {', '.join(model_names)}")
    elif cfg.model is not None:
        raise UserError(f"{task} takes no --model (its model is {model_hint}); got {cfg.model!r}")
    check_int(cfg, "depth", 1, MAX_DEPTH, why="(a tiny model)")
    check_int(cfg, "data_seed", 0)


def check_data_bytes(cfg: TaskConfig, name: str, n_bytes: int, what: str) -> None:
    """Refuse (naming field ``name``) made-up data larger than :data:`TINY_DATA_BYTES`."""
    limit = f"a tiny task's data are limited to {TINY_DATA_BYTES // 2**30} GiB"
    check(cfg, name, n_bytes <= TINY_DATA_BYTES, f"{what} would take {n_bytes / 2**30:.1f} GiB; {limit}")


@dataclass(frozen=True)
class TinyTextConfig(TaskConfig):
    n_classes: int = cfg_field(6, "number of classes")
    n_train: int = cfg_field(1200, "training sequences")
    n_test: int = cfg_field(300, "test sequences")
    seq_len: int = cfg_field(24, "tokens per sequence")
    vocab_size: int = cfg_field(128, "vocabulary size")
    keywords: int = cfg_field(3, "class keywords per sequence (the rest is filler)")
    depth: int = cfg_field(12, "BERT layers")
    width: int = cfg_field(48, "hidden size")
    data_seed: int = cfg_field(0, "seed of the made-up data")
    label: Literal["keyword", "order"] = cfg_field(
        "keyword", "what the label is: keyword = which class's keywords the sequence holds (readable from a "
        "bag of tokens); order = class pair from the keywords, and which of the pair's two keywords comes first "
        "(needs token interactions: n_classes even, keywords 2)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "label", self.label in ("keyword", "order"), "must be keyword or order")
        if self.label == "order":
            check(self, "n_classes", self.n_classes % 2 == 0, "must be even with label=order (2 orders per pair)")
            check(self, "keywords", self.keywords == 2, "must be 2 with label=order (one keyword of each kind)")
        check_tiny(self, "tiny_text", (), "a built-in tiny BERT; see task.depth and task.width")
        check_int(self, "n_classes", 2, MAX_CLASSES)
        check_int(self, "n_train", 1, MAX_SEQUENCES, why="(sequences are made one by one)")
        check_int(self, "n_test", 1, MAX_SEQUENCES, why="(sequences are made one by one)")
        check_int(self, "seq_len", 2, MAX_SEQ_LEN, why="([CLS] and at least one token; a tiny model)")
        check(self, "keywords", 1 <= self.keywords < self.seq_len,
              f"must be an integer in 1..{self.seq_len - 1} (seq_len - 1)")
        check(self, "vocab_size", 2 + 4 * self.n_classes < self.vocab_size <= MAX_VOCAB,
              f"must be > {2 + 4 * self.n_classes} and <= {MAX_VOCAB} (2 special tokens + 4 keywords per class, "
              f"and filler; a tiny model)")
        check(self, "width", 3 <= self.width <= MAX_WIDTH and self.width % 3 == 0,
              f"must be a positive multiple of 3 (3 heads), at most {MAX_WIDTH}")
        check_data_bytes(self, "n_train", (self.n_train + self.n_test) * self.seq_len * 8,
                         f"(n_train + n_test) x seq_len={self.seq_len} int64 tokens")


def make_tiny_text(cfg: TinyTextConfig, n: int, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences [CLS] tokens...: ``keywords`` tokens from the class's own keyword set at
    random positions, filler tokens elsewhere. Token 0 = PAD, 1 = CLS.

    ``label="order"``: class ``y`` belongs to pair ``y // 2``; the sequence holds one "A"
    keyword (the pair's keyword 0 or 1) and one "B" keyword (2 or 3) at random positions, A
    first for even ``y``, B first for odd: the bag of tokens names the pair, only the order
    names the class."""
    kw_per_class = 4
    first_filler = 2 + cfg.n_classes * kw_per_class
    if first_filler >= cfg.vocab_size:
        raise UserError("tiny_text: vocab_size too small for that many classes")
    rng = np.random.default_rng([cfg.data_seed, split_seed])
    y = rng.integers(0, cfg.n_classes, size=n)
    x = rng.integers(first_filler, cfg.vocab_size, size=(n, cfg.seq_len))
    if cfg.label == "order":
        for i in range(n):
            first, second = np.sort(rng.choice(np.arange(1, cfg.seq_len), size=2, replace=False))
            a, b = 2 + (y[i] // 2) * kw_per_class + rng.integers(0, 2, size=2) + np.array([0, 2])
            x[i, first], x[i, second] = (a, b) if y[i] % 2 == 0 else (b, a)
        x[:, 0] = 1
        return x, y
    for i in range(n):
        pos = rng.choice(np.arange(1, cfg.seq_len), size=cfg.keywords, replace=False)
        x[i, pos] = 2 + y[i] * kw_per_class + rng.integers(0, kw_per_class, size=cfg.keywords)
    x[:, 0] = 1
    return x, y


@TASKS.register("tiny_text", "made-up keyword sequence classification, tiny 12-layer BERT (top-1)")
class TinyText(ClassificationTask):
    """Logits from the mean of the last hidden states over non-pad tokens.

    A random-init BERT (init std 0.02) barely mixes tokens into [CLS], so its pooled
    [CLS] output is nearly input-independent; mean pooling keeps the task learnable.
    """

    config_cls = TinyTextConfig
    tiny = True
    run_defaults = RunDefaults(optimizer="adamw", lr=1e-2, batch_size=32)

    def load(self) -> TaskData:
        c = self.config
        xtr, ytr = make_tiny_text(c, c.n_train, 1)
        xte, yte = make_tiny_text(c, c.n_test, 2)
        ds = lambda x, y: ArrayDataset({"input_ids": torch.from_numpy(x), "y": torch.from_numpy(y)})
        return TaskData(ds(xtr, ytr), ds(xte, yte), train_labels=ytr, n_classes=c.n_classes)

    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        """Encoder fixed across runs (``data_seed``); classifier from the run's RNG."""
        from transformers import BertConfig, BertForSequenceClassification

        c = self.config
        cfg = BertConfig(
            vocab_size=c.vocab_size, hidden_size=c.width, num_hidden_layers=c.depth, num_attention_heads=3,
            intermediate_size=2 * c.width, max_position_embeddings=max(64, c.seq_len), num_labels=c.n_classes,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )
        check_arch(self, arch)
        with fixed_init(c.data_seed):  # the "pretrained" weights are fixed across runs
            model = BertForSequenceClassification(cfg)
        model._init_weights(model.classifier)
        targets = {"qv": ["attention.self.query", "attention.self.value"], "proj_fc2": ["attention.output.dense", "output.dense"]}
        return ModelBundle(model, "bert.encoder.layer", targets, ["classifier"], default_target="qv")

    def forward(self, model, batch):
        ids = batch["input_ids"]
        mask = (ids != 0).to(torch.float32)  # (B, T)
        h = model.bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state  # (B, T, H)
        return model.classifier(self.features(model, h, batch))

    def features(self, model, hidden, batch):
        """Mean of a layer's hidden states (B, T, H) over the non-pad tokens, (B, H)."""
        mask = (batch["input_ids"] != 0).to(hidden.dtype)  # (B, T)
        return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)

