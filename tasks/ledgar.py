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
(``minilm-l6``, ``mpnet-base``) and random-init models (``pooling='auto'``).

Cost on a CPU: one minilm-l6 LoRA step at batch 128 x 128 tokens is about 0.7 TFLOP (1.1
with every weight trained, measured with FlopCounterMode). The default federation is the
paper's (100 clients, 10 per round), so a round trains on about a tenth of the training
set; ``--clients 10`` (all sampled) makes every round a full pass. ``task.bf16`` /
``task.gradient_checkpointing`` apply only with CUDA.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fedbench.config import cfg_field, check, check_int
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import ArrayDataset, ClassificationTask, ModelBundle, RunDefaults, TaskConfig, TaskData
from fedbench.tasks.base import check_model_limit
from fedbench.tasks.cache import cached_tensors, tokenizer_fingerprint
from fedbench.tasks.models import (
    ENCODER_FAMILIES,
    TINY_ENCODER,
    EncoderClassifier,
    check_arch,
    check_targets,
    enable_gradient_checkpointing,
    encoder_pooling,
    family_layout,
    load_hf_model,
    load_tokenizer,
    on_cuda_only,
    resolve_hf,
    tiny_encoder,
    word_tokenizer,
)
from fedbench.tasks.record_files import check_rows, field_problem, hub_splits, json_type, read_json, read_local_splits, read_utf8
from fedbench.tasks.partition import check_disjoint

log = logging.getLogger(__name__)

HF_ID, HF_CONFIG = "coastalcph/lex_glue", "ledgar"
#: sizes the task holds: tokens per text (a memory cap: (N, seq_len) token tensors, seq_len^2
#: attention; the model's own limit, 512 for the BERT-family encoders, is checked when its
#: tokenizer and weights load), the word vocabulary built for tiny-bert (its 6 special
#: tokens and some words, up to 1M)
MAX_SEQ_LEN = 8_192
MIN_VOCAB, MAX_VOCAB = 16, 1_000_000
MAX_CLASSES = 100_000  # labels at or above this are data errors when no class list names the classes


@dataclass(frozen=True)
class LedgarConfig(TaskConfig):
    model: str | None = cfg_field("bert-base-uncased", "HF encoder id or folder, minilm-l6 or mpnet-base (offline "
                                                       "aliases, 6 / 12 layers), or tiny-bert (random-init, 12 layers)")
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
        super().__post_init__()
        check(self, "hf_id", self.hf_id.strip() != "", "must name an HF dataset")
        check(self, "hf_config", self.hf_config.strip() != "", "must name a config of that dataset")
        check_int(self, "seq_len", 8, MAX_SEQ_LEN, why="(the model's own position limit is checked when it loads)")
        check(self, "classifier_dropout", 0.0 <= self.classifier_dropout < 1.0, "must be a probability in [0, 1)")
        check_int(self, "max_train_examples", 1, optional=True)
        check_int(self, "tiny_vocab", MIN_VOCAB, MAX_VOCAB)


LAYOUT = "train.jsonl and test.jsonl rows {\"text\", \"label\"} (+ label_names.json)"


def _missing(why: str, data_dir: str | None) -> UserError:
    """Missing data: with --data-dir, the expected layout; without, also where to download."""
    if data_dir:
        return UserError(f"ledgar: {why} (--data-dir needs {LAYOUT})")
    return UserError(f"ledgar: {why}; download HF dataset {HF_ID} (config {HF_CONFIG}) or pass --data-dir <folder> "
                     f"with {LAYOUT}; offline: --data-dir ../shared/data/licenses (LEDGAR's schema, 23 classes), "
                     f"on a CPU with --profile cpu (MiniLM, 32 tokens, 10 clients, minutes)")


def row_checker(names: list[str], names_from: str):
    """What is wrong with a ledgar record, or None: ``text`` a string, ``label`` an integer
    class id of ``names`` (the class list read from ``names_from``), or below
    :data:`MAX_CLASSES` when there is no class list."""
    bound = len(names) or MAX_CLASSES
    classes = f"the {bound} names of {names_from}" if names else f"below {MAX_CLASSES} without a class list"

    def problem(row: dict) -> str | None:
        found = field_problem(row, "text", (str,), "a string", text=True) or field_problem(row, "label", (int,), "an integer")
        if found is None and not 0 <= row["label"] < bound:
            found = f"label {str(row['label'])[:40]} is not a class id in 0..{bound - 1} ({classes})"
        return found

    return problem


def label_names_file(root: Path) -> tuple[list[str], str]:
    """Class names from ``label_names.json`` (a JSON list of strings) or ``labels.txt``, and
    the file they came from ([] and "" without either)."""
    path = root / "label_names.json"
    if path.exists():
        names = read_json(path)
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            got = "an empty list" if names == [] else json_type(names)
            raise UserError(f"{path}: expected a JSON list of strings, got {got}")
        return names, str(path)
    if (root / "labels.txt").exists():
        return [n.strip() for n in read_utf8(root / "labels.txt").splitlines() if n.strip()], str(root / "labels.txt")
    return [], ""


def read_ledgar(cfg: LedgarConfig) -> tuple[list[dict], list[dict], list[str]]:
    """(train rows, test rows, label names); every row checked, labels against the class
    list, bad input named by file and line."""
    if cfg.data_dir:
        root = Path(cfg.data_dir).expanduser()
        if not root.is_dir():
            raise _missing(f"--data-dir {root} is not a folder", cfg.data_dir)
        names, names_from = label_names_file(root)
        splits = read_local_splits(root, row_checker(names, names_from))
    else:
        got = hub_splits(cfg.hf_id, cfg.hf_config)
        if got is None:
            raise _missing("no --data-dir given and the HF hub cannot be reached", None)
        names = got[1]
        check = row_checker(names, f"{cfg.hf_id}'s label column")
        splits = {k: check_rows(enumerate(rows, 1), check, f"{cfg.hf_id} {k}") for k, rows in got[0].items()}
    if "train" not in splits or "test" not in splits:
        raise _missing(f"expected train and test splits, found {sorted(splits) or 'none'}", cfg.data_dir)
    empty = next((k for k in ("train", "test") if not splits[k]), None)
    if empty is not None:
        raise _missing(f"the {empty} split has no rows", cfg.data_dir)
    return splits["train"], splits["test"], names


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def encode_texts(tokenizer, texts: list[str], labels: np.ndarray, seq_len: int) -> ArrayDataset:
    """Token ids and masks (N, seq_len), right-padded; labels (N,). Cached on disk by the
    texts' content hash, the tokenizer's identity and ``seq_len`` (:mod:`fedbench.tasks.cache`)."""
    parts = {"texts": _digest("\x1e".join(texts)), "n": len(texts), "tokenizer": tokenizer_fingerprint(tokenizer),
             "seq_len": seq_len, "layout": "ids-int32/mask-int8/right-pad"}
    enc = cached_tensors("ledgar", parts, len(texts), lambda: tokenize(tokenizer, texts, seq_len))
    return ArrayDataset({**enc, "y": torch.from_numpy(labels)})


def tokenize(tokenizer, texts: list[str], seq_len: int) -> dict[str, torch.Tensor]:
    """input_ids (int32) and attention_mask (int8), (N, seq_len), right-padded."""
    enc = tokenizer(texts, truncation=True, max_length=seq_len, padding="max_length", return_tensors="pt")
    return {"input_ids": enc["input_ids"].to(torch.int32), "attention_mask": enc["attention_mask"].to(torch.int8)}


def make_tokenizer(cfg: LedgarConfig, train_texts: list[str]):
    """tiny-bert: a word-level tokenizer trained on ``train_texts``; else the model's own."""
    if cfg.model == TINY_ENCODER:
        return word_tokenizer(train_texts, cfg.tiny_vocab, lm=False)
    return load_tokenizer(resolve_hf(cfg.model, "encoder"))


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
    run_defaults = RunDefaults(optimizer="adamw", lr=1e-3, batch_size=128, clients=100)
    #: ``--profile cpu``: a run that ends in minutes on a 2-core CPU (README's real-data quick
    #: start, measured there): the offline MiniLM encoder at 32 tokens (the licenses preset's
    #: size), 10 clients, 5 per round, batch 16, 5 rounds of at most 20 local steps, lr 0.005
    profiles = {"cpu": {"run": dict(clients=10, per_round=5, batch_size=16, rounds=5, max_steps=20, lr=0.005),
                        "task": dict(model="minilm-l6", seq_len=32)}}

    def load(self) -> TaskData:
        """Read, check and encode the splits; ``info["tokenizer"]`` is what encoded them."""
        c = self.config
        train, test, names = read_ledgar(c)
        if c.max_train_examples is not None and c.max_train_examples < len(train):
            keep = np.sort(np.random.default_rng(3).permutation(len(train))[: c.max_train_examples])
            train = [train[i] for i in keep]
        ytr = np.asarray([r["label"] for r in train], dtype=np.int64)
        yte = np.asarray([r["label"] for r in test], dtype=np.int64)
        n_classes = max(len(names), int(max(ytr.max(), yte.max())) + 1)
        try:
            check_disjoint([_digest(r["text"]) for r in train], [_digest(r["text"]) for r in test])
        except ValueError as e:
            log.warning("ledgar: the given splits share identical texts: %s", e)
        tok = make_tokenizer(c, [r["text"] for r in train])
        check_model_limit("seq_len", c.seq_len, tok.model_max_length, f"the tokenizer of --model {c.model}")
        log.info("ledgar: %d train / %d test texts, %d labels, seq_len %d", len(train), len(test), n_classes,
                 c.seq_len)
        return TaskData(
            train=encode_texts(tok, [r["text"] for r in train], ytr, c.seq_len),
            test=encode_texts(tok, [r["text"] for r in test], yte, c.seq_len),
            train_labels=ytr, n_classes=n_classes,
            info={"label_names": names or [str(i) for i in range(n_classes)], "tokenizer": tok,
                  "n_train": len(train), "n_test": len(test)},
        )

    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        """The encoder + a fresh classifier for ``data.n_classes`` labels (head drawn from the
        global RNG; tiny-bert's encoder from a fixed seed)."""
        c = self.config
        check_arch(arch, "ledgar")
        if c.model == TINY_ENCODER:
            encoder, src_path = tiny_encoder(len(data.info["tokenizer"]), c.seq_len + 2), None
        else:
            from transformers import AutoModel

            src = resolve_hf(c.model, "encoder")
            encoder, src_path = load_hf_model(AutoModel, src), src.path
        check_model_limit("seq_len", c.seq_len, encoder.config.max_position_embeddings, f"--model {c.model}")
        pooling = encoder_pooling(src_path) if c.pooling == "auto" else c.pooling
        blocks, targets = family_layout(encoder.config.model_type, ENCODER_FAMILIES, "encoder")
        model = EncoderClassifier(encoder, data.n_classes, pooling, c.classifier_dropout)
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
