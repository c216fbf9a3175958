"""Tiny built-in tasks: made-up data, tiny random-init models, CPU, seconds, no download.

- ``tiny_vision``: class-structured images in six visual domains (like DomainNet/NICO++);
  a 12-block tiny timm ViT (``model=vit``, default) or MLP-Mixer (``model=mixer``), or
  FedLoRA's Table 1 CNNs (``model=cnn``: per-client architectures cnn1..cnn5).
- ``tiny_text``: token-sequence classification (class keywords among filler tokens);
  a tiny 12-layer BERT built from a transformers config.
- ``tiny_lm``: made-up instruction -> response pairs; a tiny 12-layer Llama-style causal
  LM; Rouge-L (rouge-score) of greedy generations.

Each is built so that a few rounds of FedAvg clearly beat chance: tests check learning,
not just that code ran. Data are generated from a fixed data seed (``data_seed``), so
every run sees the same examples whatever its run seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import (
    ArrayDataset,
    ClassificationTask,
    EvalResult,
    ModelBundle,
    Task,
    TaskConfig,
    TaskData,
    eval_indices,
    iterate_batches,
    to_device,
)
from fedbench.tasks.models import fixed_init

def check_arch(task: Task, arch: str | None) -> None:
    if arch is not None and arch not in task.archs():
        raise UserError(f"{type(task).__name__}: unknown architecture {arch!r} (has: {', '.join(task.archs())})")


DOMAINS = ("plain", "swapped", "inverted", "gray", "faded", "noisy")


def _check_tiny(cfg: TaskConfig, task: str, model_names: tuple[str, ...], model_hint: str) -> None:
    """What every tiny task config refuses: a data directory, a model that is not its own."""
    base_check = getattr(super(type(cfg), cfg), "__post_init__", None)
    if base_check is not None:
        base_check()
    if cfg.data_dir is not None:
        raise UserError(f"{task} takes no --data-dir (its data are generated); got {cfg.data_dir!r}")
    if model_names:
        check(cfg, "model", cfg.model in model_names, f"{task} builds its own model; choose from {', '.join(model_names)}")
    elif cfg.model is not None:
        raise UserError(f"{task} takes no --model (its model is {model_hint}); got {cfg.model!r}")
    for name in ("n_train", "n_test", "n_train_per_domain", "n_test_per_domain", "depth"):
        if hasattr(cfg, name):
            check(cfg, name, getattr(cfg, name) >= 1, "must be an integer >= 1")
    check(cfg, "data_seed", cfg.data_seed >= 0, "must be an integer >= 0")


# ----------------------------------------------------------------------------- vision
@dataclass(frozen=True)
class TinyVisionConfig(TaskConfig):
    model: str | None = cfg_field("vit", "'vit' (12-block tiny ViT), 'mixer' (12-block tiny MLP-Mixer) or 'cnn' "
                                         "(FedLoRA Table 1 CNNs, architectures cnn1..cnn5, all trained whole)")
    n_classes: int = cfg_field(10, "number of classes")
    n_train_per_domain: int = cfg_field(240, "training images per domain")
    n_test_per_domain: int = cfg_field(60, "test images per domain")
    img_size: int = cfg_field(32, "image side in pixels")
    depth: int = cfg_field(12, "transformer / mixer blocks")
    width: int = cfg_field(48, "embedding width")
    noise: float = cfg_field(1.0, "per-pixel noise std (signal std is 1)")
    data_seed: int = cfg_field(0, "seed of the made-up data (fixed across runs)")

    def __post_init__(self) -> None:
        _check_tiny(self, "tiny_vision", ("vit", "mixer", "cnn"), "")
        check(self, "n_classes", self.n_classes >= 2, "must be an integer >= 2")
        check(self, "img_size", self.img_size >= 8 and self.img_size % 8 == 0,
              "must be a positive multiple of 8 (8x8 patches)")
        check(self, "width", self.width >= 1 and (self.model != "vit" or self.width % 3 == 0),
              "must be a positive multiple of 3 (the ViT has 3 heads)" if self.model == "vit" else "must be >= 1")
        check(self, "noise", self.noise >= 0, "must be a number >= 0")
        check(self, "img_size", self.model != "cnn" or self.img_size >= 16,
              "must be >= 16 with model=cnn (two 5x5 convs and two 2x2 pools)")


def make_tiny_images(cfg: TinyVisionConfig, n_per_domain: int, split_seed: int) -> tuple[np.ndarray, ...]:
    """Images (N,3,S,S) whose class is an 8x8 texture tiled over the image; six domains
    apply a pixel-wise style (channel swap, inversion, grayscale, fading, extra noise)."""
    proto_rng = np.random.default_rng(cfg.data_seed)
    tiles = proto_rng.normal(size=(cfg.n_classes, 3, 8, 8)).astype(np.float32)  # (C,3,8,8)
    reps = cfg.img_size // 8
    rng = np.random.default_rng([cfg.data_seed, split_seed])
    xs, ys, ds = [], [], []
    for d in range(len(DOMAINS)):
        y = rng.integers(0, cfg.n_classes, size=n_per_domain)
        x = np.tile(tiles[y], (1, 1, reps, reps))  # (n,3,S,S)
        x = x * rng.uniform(0.7, 1.3, size=(n_per_domain, 1, 1, 1)) + cfg.noise * rng.normal(size=x.shape)
        if d == 1:
            x = x[:, [2, 0, 1]]
        elif d == 2:
            x = -x
        elif d == 3:
            x = np.repeat(x.mean(axis=1, keepdims=True), 3, axis=1)
        elif d == 4:
            x = 0.5 * x + 0.5
        elif d == 5:
            x = x + cfg.noise * rng.normal(size=x.shape)
        xs.append(x.astype(np.float32))
        ys.append(y)
        ds.append(np.full(n_per_domain, d))
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(ds)


@TASKS.register("tiny_vision", "made-up 6-domain images, tiny 12-block ViT or Mixer (top-1, per domain)")
class TinyVision(ClassificationTask):
    config_cls = TinyVisionConfig
    tiny = True
    run_defaults = {"optimizer": "adamw", "lr": 3e-3, "batch_size": 32}

    def load(self) -> TaskData:
        c = self.config
        xtr, ytr, dtr = make_tiny_images(c, c.n_train_per_domain, 1)
        xte, yte, dte = make_tiny_images(c, c.n_test_per_domain, 2)
        return TaskData(
            train=ArrayDataset({"x": torch.from_numpy(xtr), "y": torch.from_numpy(ytr)}),
            test=ArrayDataset({"x": torch.from_numpy(xte), "y": torch.from_numpy(yte)}),
            train_labels=ytr, n_classes=c.n_classes, train_domains=dtr, test_domains=dte,
            domain_names=list(DOMAINS), info={"in_channels": 3, "img_size": c.img_size},
        )

    def archs(self) -> tuple[str, ...]:
        if self.config.model == "cnn":
            from fedbench.tasks.cnn import ARCHS

            return ARCHS
        return ("default",)

    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        """The backbone stands for fixed pretrained weights: drawn from ``data_seed``, the
        same in every run; the head is drawn from the run's RNG (its own init scheme)."""
        import timm.models.mlp_mixer as mixer
        import timm.models.vision_transformer as vit

        c = self.config
        check_arch(self, arch)
        if c.model == "cnn":  # random init from the run's RNG: a CNN is trained whole, nothing stands for pretraining
            from fedbench.tasks.cnn_task import cnn_bundle

            return cnn_bundle(arch, 3, c.n_classes, c.img_size)
        if c.model == "vit":
            with fixed_init(c.data_seed):
                model = vit.VisionTransformer(
                    img_size=c.img_size, patch_size=8, num_classes=c.n_classes, embed_dim=c.width,
                    depth=c.depth, num_heads=3, mlp_ratio=2.0, global_pool="avg",
                )
            vit.init_weights_vit_timm(model.head)
            targets = {"proj_fc2": ["attn.proj", "mlp.fc2"], "qv": ["attn.qkv"]}
            return ModelBundle(model, "blocks", targets, ["head"], default_target="proj_fc2")
        if c.model == "mixer":
            with fixed_init(c.data_seed):  # timm initialises the Mixer head to zero: nothing to redraw
                model = mixer.MlpMixer(
                    num_classes=c.n_classes, img_size=c.img_size, patch_size=8, num_blocks=c.depth, embed_dim=c.width,
                )
            # Mixer has no attention: LoRA on the two fc2s (FedRA) for every profile
            targets = {"proj_fc2": ["mlp_tokens.fc2", "mlp_channels.fc2"]}
            targets["qv"] = targets["proj_fc2"]
            return ModelBundle(model, "blocks", targets, ["head"], default_target="proj_fc2")
        raise UserError(f"tiny_vision: unknown model {c.model!r} (choose from: vit, mixer, cnn)")

    def init_head(self, module, template):
        """The ViT's head scheme (timm's ``init_weights_vit_timm``: trunc-normal std 0.02,
        zero bias), as ``build_model`` draws it; the Mixer's head is zero (copied)."""
        if self.config.model == "vit":
            import timm.models.vision_transformer as vit

            for m in module.modules():
                vit.init_weights_vit_timm(m)
        else:
            super().init_head(module, template)

    def forward(self, model, batch):
        return model(batch["x"])

    def features(self, model, hidden, batch):
        """A block's output (B, T, D) through the model's own final norm and pooling
        (timm's ``forward_head(..., pre_logits=True)``), as its head sees the last block;
        a CNN block's (B, D) output as it is."""
        if self.config.model == "cnn":
            return hidden
        return model.forward_head(model.norm(hidden), pre_logits=True)


# ------------------------------------------------------------------------------- text
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

    def __post_init__(self) -> None:
        _check_tiny(self, "tiny_text", (), "a built-in tiny BERT; see task.depth and task.width")
        check(self, "n_classes", self.n_classes >= 2, "must be an integer >= 2")
        check(self, "seq_len", self.seq_len >= 2, "must be an integer >= 2 ([CLS] and at least one token)")
        check(self, "keywords", 1 <= self.keywords < self.seq_len,
              f"must be an integer in 1..{self.seq_len - 1} (seq_len - 1)")
        check(self, "vocab_size", self.vocab_size > 2 + 4 * self.n_classes,
              f"must be > {2 + 4 * self.n_classes} (2 special tokens + 4 keywords per class, and filler)")
        check(self, "width", self.width >= 3 and self.width % 3 == 0, "must be a positive multiple of 3 (3 heads)")


def make_tiny_text(cfg: TinyTextConfig, n: int, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences [CLS] tokens...: ``keywords`` tokens from the class's own keyword set at
    random positions, filler tokens elsewhere. Token 0 = PAD, 1 = CLS."""
    kw_per_class = 4
    first_filler = 2 + cfg.n_classes * kw_per_class
    if first_filler >= cfg.vocab_size:
        raise UserError("tiny_text: vocab_size too small for that many classes")
    rng = np.random.default_rng([cfg.data_seed, split_seed])
    y = rng.integers(0, cfg.n_classes, size=n)
    x = rng.integers(first_filler, cfg.vocab_size, size=(n, cfg.seq_len))
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
    run_defaults = {"optimizer": "adamw", "lr": 1e-2, "batch_size": 32}

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


# --------------------------------------------------------------------------------- lm
@dataclass(frozen=True)
class TinyLMConfig(TaskConfig):
    n_categories: int = cfg_field(4, "instruction categories (used by label-skew settings)")
    n_words: int = cfg_field(24, "content words")
    n_train: int = cfg_field(800, "training pairs")
    n_test: int = cfg_field(120, "held-out pairs for Rouge-L")
    depth: int = cfg_field(12, "decoder layers")
    width: int = cfg_field(64, "hidden size")
    data_seed: int = cfg_field(0, "seed of the made-up data")

    def __post_init__(self) -> None:
        _check_tiny(self, "tiny_lm", (), "a built-in tiny Llama; see task.depth and task.width")
        check(self, "n_categories", self.n_categories >= 1, "must be an integer >= 1")
        check(self, "n_words", self.n_words >= 1, "must be an integer >= 1")
        check(self, "width", self.width >= 8 and self.width % 8 == 0,
              "must be a positive multiple of 8 (4 heads of even size)")


PAD, BOS, SEP, EOS = 0, 1, 2, 3
PROMPT_LEN, RESPONSE_LEN = 5, 4


def make_tiny_pairs(cfg: TinyLMConfig, n: int, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt [BOS, CAT_c, w1, w2, SEP] -> response [A_c, m(w1), m(w2), EOS]; m is a fixed
    permutation of the content words, A_c a per-category answer token."""
    cat0 = 4
    ans0 = cat0 + cfg.n_categories
    word0 = ans0 + cfg.n_categories
    perm = np.random.default_rng(cfg.data_seed).permutation(cfg.n_words)
    rng = np.random.default_rng([cfg.data_seed, split_seed])
    c = rng.integers(0, cfg.n_categories, size=n)
    w = rng.integers(0, cfg.n_words, size=(n, 2))
    seq = np.stack(
        [np.full(n, BOS), cat0 + c, word0 + w[:, 0], word0 + w[:, 1], np.full(n, SEP),
         ans0 + c, word0 + perm[w[:, 0]], word0 + perm[w[:, 1]], np.full(n, EOS)], axis=1)
    return seq, c


def rouge_l(predictions: list[str], references: list[str]) -> float:
    """Mean Rouge-L F-measure (rouge-score, the implementation behind HF evaluate's)."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    if not predictions:
        return float("nan")
    return float(np.mean([scorer.score(r, p)["rougeL"].fmeasure for p, r in zip(predictions, references)]))


def _tokens_to_text(ids) -> str:
    out = []
    for t in ids:
        if int(t) == EOS:
            break
        out.append(f"t{int(t)}")
    return " ".join(out)


@TASKS.register("tiny_lm", "made-up instruction -> response pairs, tiny 12-layer causal LM (Rouge-L)")
class TinyLM(Task):
    config_cls = TinyLMConfig
    kind = "generation"
    tiny = True
    metric_name = "rouge_l"
    run_defaults = {"optimizer": "adamw", "lr": 1e-2, "batch_size": 32}

    @property
    def vocab_size(self) -> int:
        return 4 + 2 * self.config.n_categories + self.config.n_words

    def load(self) -> TaskData:
        c = self.config
        tr, ctr = make_tiny_pairs(c, c.n_train, 1)
        te, cte = make_tiny_pairs(c, c.n_test, 2)
        ds = lambda s: ArrayDataset({"input_ids": torch.from_numpy(s)})
        return TaskData(ds(tr), ds(te), train_labels=ctr, n_classes=c.n_categories)

    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        """Decoder fixed across runs (``data_seed``); the trainable read-out from the run's RNG."""
        from transformers import LlamaConfig, LlamaForCausalLM

        c = self.config
        cfg = LlamaConfig(
            vocab_size=self.vocab_size, hidden_size=c.width, intermediate_size=2 * c.width, num_hidden_layers=c.depth,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32, tie_word_embeddings=False,
            initializer_range=0.1,  # a random LM mixes tokens enough to learn in a few rounds
        )
        check_arch(self, arch)
        with fixed_init(c.data_seed):
            model = LlamaForCausalLM(cfg)
        model._init_weights(model.lm_head)
        targets = {"qv": ["self_attn.q_proj", "self_attn.v_proj"], "proj_fc2": ["self_attn.o_proj", "mlp.down_proj"]}
        # a random-init tiny LM needs a trainable read-out to learn in a few rounds
        return ModelBundle(model, "model.layers", targets, ["lm_head"], default_target="qv")

    def loss(self, model, batch):
        ids = batch["input_ids"]
        logits = model(input_ids=ids).logits  # (B, T, V)
        # next-token loss on the response only (positions PROMPT_LEN..end)
        pred = logits[:, PROMPT_LEN - 1 : -1]
        target = ids[:, PROMPT_LEN:]
        return nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1)), logits

    @torch.no_grad()
    def generate(self, model, prompts: torch.Tensor, max_new: int) -> torch.Tensor:
        """Greedy decoding without a KV cache (works for block-subset models too)."""
        ids = prompts
        for _ in range(max_new):
            nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
        return ids[:, prompts.shape[1]:]

    @torch.no_grad()
    def evaluate(self, model, dataset, device, domains=None, domain_names=None, logits_fn=None):
        idx = eval_indices(len(dataset), self.config.eval_max_examples)
        preds, refs = [], []
        for batch in iterate_batches(dataset, idx, self.config.eval_batch_size):
            ids = to_device(batch, device)["input_ids"]
            out = self.generate(model, ids[:, :PROMPT_LEN], RESPONSE_LEN).cpu()
            preds += [_tokens_to_text(r) for r in out]
            refs += [_tokens_to_text(r) for r in ids[:, PROMPT_LEN:].cpu()]
        exact = float(np.mean([p == r for p, r in zip(preds, refs)]))
        return EvalResult("rouge_l", rouge_l(preds, refs), None, {"exact_match": exact})
