"""``tiny_lm``: made-up instruction -> response pairs, a tiny 12-layer Llama-style causal LM,
Rouge-L of greedy generations (see :mod:`fedbench.tasks.tiny`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedbench.config import cfg_field, check, check_int
from fedbench.tasks import TASKS
from fedbench.tasks.base import ArrayDataset, EvalResult, ModelBundle, RunDefaults, Task, TaskConfig, TaskData
from fedbench.tasks.base import eval_indices, iterate_batches, to_device
from fedbench.tasks.models import fixed_init
from fedbench.tasks.rouge import rouge_l
from fedbench.tasks.tiny import MAX_CLASSES, MAX_WIDTH, check_arch, check_data_bytes, check_tiny


PAD, BOS, SEP, EOS = 0, 1, 2, 3
PROMPT_LEN, RESPONSE_LEN = 5, 4
SEQ_LEN = PROMPT_LEN + RESPONSE_LEN
MAX_WORDS = 100_000


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
        super().__post_init__()
        check_tiny(self, "tiny_lm", (), "a built-in tiny Llama; see task.depth and task.width")
        check_int(self, "n_categories", 1, MAX_CLASSES)
        check_int(self, "n_words", 1, MAX_WORDS, why="(the vocabulary of a tiny model)")
        check_int(self, "n_train", 1)
        check_int(self, "n_test", 1)
        check(self, "width", 8 <= self.width <= MAX_WIDTH and self.width % 8 == 0,
              f"must be a positive multiple of 8 (4 heads of even size), at most {MAX_WIDTH}")
        check_data_bytes(self, "n_train", (self.n_train + self.n_test) * SEQ_LEN * 8,
                         f"(n_train + n_test) pairs of {SEQ_LEN} int64 tokens")


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
    run_defaults = RunDefaults(optimizer="adamw", lr=1e-2, batch_size=32)

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
