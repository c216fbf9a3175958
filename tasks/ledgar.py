"""LEDGAR legal-provision classification with a BERT-style encoder (Fed-HeLLo, Sec. IV-A).

Fed-HeLLo fine-tunes BERT-base on LEDGAR (LexGLUE; 100 provision labels) with LoRA on
query and value (rank 16, alpha 16, dropout 0.1), 100 clients, 10 per round, batch 128,
AdamW, settings ``iid``, ``20/1.0``, ``10/1.0``; the metric is macro-F1 (micro-F1 and
top-1 are recorded too).

Sources (first that applies):

- ``--data-dir`` with ``train`` / ``test`` (+ optional ``validation``) record files
  (``.jsonl`` / ``.json`` / ``.parquet``) or a ``save_to_disk`` DatasetDict, rows
  ``{"text": str, "label": int}``; class names from ``label_names.json`` (a JSON list) or
  ``labels.txt`` (one per line) if present. ``../shared/data/licenses`` is such a folder
  (23 license classes, see its README);
- no ``--data-dir``: HF ``coastalcph/lex_glue``, config ``ledgar``.

Texts are tokenized once at load time, truncated to ``seq_len`` tokens (default 128, which
keeps CPU runs short; LexGLUE used 512 for LEDGAR: set ``task.seq_len=512`` on a GPU) and
each batch is trimmed to its longest sequence. The classifier reads the [CLS] state
(BERT fine-tuning) or the mean of the token states for sentence-transformers encoders
(``minilm-l6``) and random-init models (``pooling='auto'``).

Cost on a CPU: one minilm-l6 LoRA step at batch 128 x 128 tokens is about 0.7 TFLOP (1.1
with every weight trained, measured with FlopCounterMode). The default federation is the
paper's (100 clients, 10 per round), so a round trains on about a tenth of the training
set; ``--clients 10`` (all sampled) makes every round a full pass. ``task.bf16`` /
``task.gradient_checkpointing`` apply only with CUDA.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fedbench.config import cfg_field
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import ArrayDataset, ClassificationTask, ModelBundle, TaskConfig, TaskData
from fedbench.tasks.models import (
    ENCODER_FAMILIES,
    TINY_ENCODER,
    EncoderClassifier,
    check_targets,
    enable_gradient_checkpointing,
    encoder_pooling,
    family_layout,
    hub_splits,
    load_hf_model,
    load_tokenizer,
    on_cuda_only,
    read_local_splits,
    resolve_hf,
    tiny_encoder,
    word_tokenizer,
)
from fedbench.tasks.partition import check_disjoint

log = logging.getLogger(__name__)

HF_ID, HF_CONFIG = "coastalcph/lex_glue", "ledgar"


@dataclass(frozen=True)
class LedgarConfig(TaskConfig):
    model: str | None = cfg_field("bert-base-uncased", "HF encoder id or folder, minilm-l6 (offline alias), or "
                                                       "tiny-bert (random-init, 12 layers)")
    hf_id: str = cfg_field(HF_ID, "HF dataset id used when no --data-dir is given")
    hf_config: str = cfg_field(HF_CONFIG, "its config name")
    seq_len: int = cfg_field(128, "tokens per text after truncation (LexGLUE: 512; 128 keeps CPU runs short)")
    pooling: Literal["auto", "cls", "mean"] = cfg_field(
        "auto", "classifier input: [CLS] state, mean of token states, or auto (mean for sentence-transformers "
                "folders and tiny-bert, else cls)")
    classifier_dropout: float = cfg_field(0.1, "dropout before the classifier")
    max_train_examples: int | None = cfg_field(None, "subsample of the training set, the same in every run "
                                                     "(None = all)")
    tiny_vocab: int = cfg_field(8000, "vocabulary of the word-level tokenizer built for tiny-bert")
    gradient_checkpointing: bool = cfg_field(False, "activation checkpointing in the encoder (applied only with CUDA)")
    bf16: bool = cfg_field(False, "bfloat16 autocast in forward/backward (applied only on CUDA tensors)")

    def __post_init__(self) -> None:
        if self.seq_len < 8:
            raise ValueError("seq_len must be >= 8")


def _missing(why: str) -> UserError:
    return UserError(f"ledgar: {why}; download HF dataset {HF_ID} (config {HF_CONFIG}) or pass --data-dir <folder> "
                     f"with train.jsonl and test.jsonl rows {{\"text\", \"label\"}} (+ label_names.json)")


def label_names_file(root: Path) -> list[str]:
    if (root / "label_names.json").exists():
        return list(json.loads((root / "label_names.json").read_text()))
    if (root / "labels.txt").exists():
        return [n.strip() for n in (root / "labels.txt").read_text().splitlines() if n.strip()]
    return []


def read_ledgar(cfg: LedgarConfig) -> tuple[list[dict], list[dict], list[str]]:
    if cfg.data_dir:
        root = Path(cfg.data_dir).expanduser()
        if not root.is_dir():
            raise _missing(f"--data-dir {root} is not a folder")
        splits, names = read_local_splits(root), label_names_file(root)
    else:
        got = hub_splits(cfg.hf_id, cfg.hf_config)
        if got is None:
            raise _missing("no --data-dir given and the HF hub cannot be reached")
        splits, names = got
    if "train" not in splits or "test" not in splits:
        raise _missing(f"expected train and test splits, found {sorted(splits) or 'none'}")
    for split in ("train", "test"):
        bad = next((r for r in splits[split] if not isinstance(r.get("text"), str) or not isinstance(r.get("label"), int)),
                   None)
        if bad is not None or not splits[split]:
            raise _missing(f"{split} rows must have a string 'text' and an integer 'label'")
    return splits["train"], splits["test"], names


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def encode_texts(tokenizer, texts: list[str], labels: np.ndarray, seq_len: int) -> ArrayDataset:
    """Token ids and masks (N, seq_len), right-padded; labels (N,)."""
    enc = tokenizer(texts, truncation=True, max_length=seq_len, padding="max_length", return_tensors="pt")
    return ArrayDataset({"input_ids": enc["input_ids"].to(torch.int32),
                         "attention_mask": enc["attention_mask"].to(torch.int8),
                         "y": torch.from_numpy(labels)})


def trim(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the padding columns every sequence of the batch has: (B, T_batch) ids, mask."""
    mask = batch["attention_mask"]
    t = max(1, int(mask.sum(1).max()))
    return batch["input_ids"][:, :t].long(), mask[:, :t].long()


@TASKS.register("ledgar", "LEDGAR provisions (or any text/label JSONL), BERT-style encoder (macro-F1)")
class Ledgar(ClassificationTask):
    config_cls = LedgarConfig
    metric_name = "macro_f1"
    # Fed-HeLLo: AdamW, batch 128, 100 clients (the paper gives no learning rate; 1e-3 for LoRA + head is ours)
    run_defaults = {"optimizer": "adamw", "lr": 1e-3, "batch_size": 128, "clients": 100}
    n_classes: int | None = None

    def tokenizer(self, train_texts: list[str] | None = None):
        if getattr(self, "_tokenizer", None) is None:
            if self.config.model == TINY_ENCODER:
                if train_texts is None:
                    raise RuntimeError("tiny-bert builds its tokenizer from the training texts: call load() first")
                self._tokenizer = word_tokenizer(train_texts, self.config.tiny_vocab, lm=False)
            else:
                self._tokenizer = load_tokenizer(resolve_hf(self.config.model, "encoder"))
        return self._tokenizer

    def load(self) -> TaskData:
        c = self.config
        train, test, names = read_ledgar(c)
        if c.max_train_examples is not None and c.max_train_examples < len(train):
            keep = np.sort(np.random.default_rng(3).permutation(len(train))[: c.max_train_examples])
            train = [train[i] for i in keep]
        ytr = np.asarray([r["label"] for r in train], dtype=np.int64)
        yte = np.asarray([r["label"] for r in test], dtype=np.int64)
        self.n_classes = max(len(names), int(max(ytr.max(), yte.max())) + 1)
        self.label_names = names or [str(i) for i in range(self.n_classes)]
        try:
            check_disjoint([_digest(r["text"]) for r in train], [_digest(r["text"]) for r in test])
        except ValueError as e:
            log.warning("ledgar: the given splits share identical texts: %s", e)
        tok = self.tokenizer([r["text"] for r in train])
        log.info("ledgar: %d train / %d test texts, %d labels, seq_len %d", len(train), len(test), self.n_classes,
                 c.seq_len)
        return TaskData(
            train=encode_texts(tok, [r["text"] for r in train], ytr, c.seq_len),
            test=encode_texts(tok, [r["text"] for r in test], yte, c.seq_len),
            train_labels=ytr, n_classes=self.n_classes,
            info={"label_names": self.label_names, "n_train": len(train), "n_test": len(test)},
        )

    def build_model(self) -> ModelBundle:
        c = self.config
        if self.n_classes is None:
            self.load()
        if c.model == TINY_ENCODER:
            encoder, src_path = tiny_encoder(len(self.tokenizer()), c.seq_len + 2), None
        else:
            from transformers import AutoModel

            src = resolve_hf(c.model, "encoder")
            encoder, src_path = load_hf_model(AutoModel, src), src.path
        pooling = encoder_pooling(src_path) if c.pooling == "auto" else c.pooling
        blocks, targets = family_layout(encoder.config.model_type, ENCODER_FAMILIES, "encoder")
        model = EncoderClassifier(encoder, self.n_classes, pooling, c.classifier_dropout)
        check_targets(model, f"encoder.{blocks}", targets)
        if on_cuda_only(c.gradient_checkpointing, "gradient_checkpointing"):
            enable_gradient_checkpointing(encoder)
        log.info("ledgar: %s encoder, %s pooling", encoder.config.model_type, pooling)
        return ModelBundle(model, f"encoder.{blocks}", targets, ["classifier"], default_target="qv")

    def autocast(self, t: torch.Tensor):
        if self.config.bf16 and t.is_cuda:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def forward(self, model, batch):
        ids, mask = trim(batch)
        with self.autocast(ids):
            return model(ids, mask).float()  # (B, n_classes)

    def features(self, model, hidden, batch):
        """A layer's hidden states (B, T, H) pooled like the classifier input, (B, H)."""
        mask = batch["attention_mask"][:, : hidden.shape[1]].long()
        return model.pool(hidden, mask)
