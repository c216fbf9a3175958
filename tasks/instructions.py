"""Instruction tuning of causal LMs: Dolly-15k and Natural Instructions (Fed-HeLLo, Sec. IV-A).

The two tasks differ only in field names and defaults (the last ~40 lines); everything
else (reading, prompting, generation, scoring) is the one shared ``InstructionTask``.
Examples and their held-out split are in :mod:`fedbench.tasks.instruction_examples`, the
token tensors in :mod:`fedbench.tasks.instruction_encoding`.

Fed-HeLLo fine-tunes OPT-1.3B on Dolly-15K and the Llama-like DataJuicer-1B on Natural
Instructions with LoRA on query and value (rank 8, alpha 16, dropout 0.1), 50 clients,
10 per round, batch 1, AdamW, 25 rounds; label skew is over instruction categories (Dolly's
8 categories: ``iid``, ``3/1.0``, ``1/1.0``) or tasks (NI: ``iid``, ``20/1.0``,
``15/1.0``). The metric is Rouge-L (rouge-score) of greedy generations on held-out
examples.

Each example becomes ``prompt + response + EOS``. The prompt is the tokenizer's chat
template when it has one (``prompt_format='auto'``; e.g. SmolLM2-Instruct) or a plain
"### Instruction / ### Context / ### Response" layout. Training is next-token
cross-entropy on the response tokens only (the prompt's labels are masked). Sequences are
cut to ``seq_len`` tokens: a long prompt loses its beginning (the first token, BOS, is
kept), then the response is cut to what is left. Evaluation left-pads the prompts of a
batch and decodes greedily (``max_new_tokens``) with HF ``generate``; with a block subset
in place (FedRA-style evaluation of a smaller model) the KV cache is off, since its layer
indices would not match.

Sources (first that applies): ``--data-dir`` with ``train`` / ``test`` record files
(``.jsonl`` / ``.json`` / ``.parquet``) or a single record file (a seeded held-out split
of ``test_fraction`` is made, identical examples kept on one side), or a ``save_to_disk``
folder; else the HF dataset ``hf_id``. ``../shared/data/instructions`` is a Dolly-format
set built from WordNet (see its README).

Real LMs train LoRA only (no head modules, as in the papers); ``tiny-llama`` (random
init, word-level tokenizer from the training texts, for tests and smoke runs) also trains
its output layer, without which a random model cannot learn to emit words
(``train_lm_head``).

Run defaults follow the paper (AdamW, batch 1), so a default round is one step per
training example; CPU smoke runs want e.g. ``--batch-size 8 --max-steps 20``. On a GPU,
``task.bf16=true`` and ``task.gradient_checkpointing=true`` cut memory (both are ignored
without CUDA).
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
from torch import nn

from fedbench.config import cfg_field, check, check_int
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import EvalResult, ModelBundle, RunDefaults, Task, TaskConfig, TaskData, check_fraction
from fedbench.tasks.base import check_model_limit, eval_indices
from fedbench.tasks.base import iterate_batches, to_device
from fedbench.tasks.cache import cached_tensors, tokenizer_fingerprint
from fedbench.tasks.models import (
    LM_FAMILIES,
    TINY_LM,
    block_count,
    check_arch,
    check_targets,
    enable_gradient_checkpointing,
    family_layout,
    load_hf_model,
    load_tokenizer,
    on_cuda_only,
    resolve_hf,
    tiny_lm,
    word_tokenizer,
)
from fedbench.tasks.instruction_encoding import IGNORE, PromptDataset, encode_pairs
from fedbench.tasks.instruction_examples import Example, drop_empty_responses, first_value, holdout, row_problem
from fedbench.tasks.record_files import check_rows, hub_splits, read_local_splits, read_records
from fedbench.tasks.partition import check_disjoint
from fedbench.tasks.rouge import rouge_l

log = logging.getLogger(__name__)

#: sizes an instruction task holds: tokens per training sequence and tokens generated per
#: prompt (memory caps; the model's own position limit is checked when it loads), the word
#: vocabulary built for tiny-llama (its 6 special tokens and some words, up to 1M rows)
MAX_SEQ_LEN, MAX_NEW_TOKENS = 32_768, 8_192
MIN_VOCAB, MAX_VOCAB = 16, 1_000_000
DOLLY_HF_ID = "databricks/databricks-dolly-15k"
NI_HF_ID = "Muennighoff/natural-instructions"
DOLLY_CATEGORIES = ("brainstorming", "classification", "closed_qa", "creative_writing", "general_qa",
                    "information_extraction", "open_qa", "summarization")


@dataclass(frozen=True)
class InstructionConfig(TaskConfig):
    hf_id: str = cfg_field(DOLLY_HF_ID, "HF dataset id used when no --data-dir is given")
    eval_batch_size: int = cfg_field(16, "prompts generated at once at evaluation")
    eval_max_examples: int | None = cfg_field(200, "Rouge-L on at most this many held-out examples (a fixed "
                                                   "seeded subset; None = all)")
    seq_len: int = cfg_field(256, "tokens of prompt + response in training")
    max_new_tokens: int = cfg_field(64, "greedy generation length at evaluation")
    prompt_format: Literal["auto", "template", "chat"] = cfg_field(
        "auto", "chat = the tokenizer's chat template, template = '### Instruction/Context/Response' text, "
                "auto = chat when the tokenizer has a template")
    test_fraction: float = cfg_field(0.1, "held-out share when the data has no test split")
    split_seed: int = cfg_field(0, "seed of that held-out split and of the subsamples below (fixed across runs)")
    max_train_examples: int | None = cfg_field(None, "seeded subsample of the training set (None = all)")
    max_per_category: int | None = cfg_field(None, "at most this many training examples per category/task")
    tiny_vocab: int = cfg_field(8000, "vocabulary of the word-level tokenizer built for tiny-llama")
    train_lm_head: bool | None = cfg_field(None, "also train and average the output layer (lm_head); None = only "
                                                 "for the random-init tiny-llama (the papers train LoRA only)")
    gradient_checkpointing: bool = cfg_field(False, "activation checkpointing (applied only with CUDA)")
    bf16: bool = cfg_field(False, "bfloat16 autocast in forward/backward/generation (applied only on CUDA tensors)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "hf_id", self.hf_id.strip() != "", "must name an HF dataset")
        check_int(self, "seq_len", 8, MAX_SEQ_LEN, why="(the model's own position limit is checked when it loads)")
        check_int(self, "max_new_tokens", 1, MAX_NEW_TOKENS)
        check_fraction(self, "test_fraction")
        check_int(self, "split_seed", 0)
        check_int(self, "max_train_examples", 1, optional=True)
        check_int(self, "max_per_category", 1, optional=True)
        check_int(self, "tiny_vocab", MIN_VOCAB, MAX_VOCAB)


class InstructionTask(Task):
    """Shared implementation; subclasses name their fields, source and defaults."""

    config_cls = InstructionConfig
    kind = "generation"
    metric_name = "rouge_l"
    dataset_name = "instructions"
    fields: dict[str, tuple[str, ...]] = {}
    context_label = "Context"
    layout_hint = ""
    categories: tuple[str, ...] = ()  # fixed category order (others: sorted names)
    # Fed-HeLLo: AdamW, batch 1, 50 clients (no learning rate given; 1e-4 is ours)
    run_defaults = RunDefaults(optimizer="adamw", lr=1e-4, batch_size=1, clients=50)

    # ---------------------------------------------------------------- data
    def missing(self, why: str) -> UserError:
        """Missing data: with --data-dir, the expected layout; without, also where to download."""
        if self.config.data_dir:
            return UserError(f"{self.dataset_name}: {why} (--data-dir needs {self.layout_hint})")
        return UserError(f"{self.dataset_name}: {why}; download HF dataset {self.config.hf_id} or pass "
                         f"--data-dir <folder> with {self.layout_hint}")

    def row_problem(self, row: dict) -> str | None:
        """Why a record cannot be trained on (:func:`~fedbench.tasks.instruction_examples.row_problem`), or None."""
        return row_problem(row, self.fields)

    def to_example(self, row: dict) -> Example:
        vals = {k: first_value(row, names) for k, names in self.fields.items()}
        return Example(vals["instruction"].strip(), str(vals["context"] or "").strip(), vals["response"].strip(),
                       str(vals["category"] or "none"))

    def read_rows(self) -> dict[str, list[dict]]:
        if self.config.data_dir:
            root = Path(self.config.data_dir).expanduser()
            if root.is_file():
                return {"all": read_records(root, self.row_problem)}
            if not root.is_dir():
                raise self.missing(f"--data-dir {root} is not a folder")
            splits = read_local_splits(root, self.row_problem)
            if not splits:
                raise self.missing(f"no record files in {root}")
            return splits
        got = hub_splits(self.config.hf_id)
        if got is None:
            raise self.missing("no --data-dir given and the HF hub cannot be reached")
        return {k: check_rows(enumerate(rows, 1), self.row_problem, f"{self.config.hf_id} {k}")
                for k, rows in got[0].items()}

    def read_examples(self) -> tuple[list[Example], list[Example]]:
        c = self.config
        splits = {k: [self.to_example(r) for r in rows] for k, rows in self.read_rows().items()}
        for k, rows in splits.items():
            splits[k], dropped = drop_empty_responses(rows)
            if dropped:
                log.warning("%s: %s split: %d of %d rows dropped (an empty response: nothing to train or score "
                            "on; only a row with no text at all is refused)", self.dataset_name, k, dropped, len(rows))
        if "train" in splits and "test" in splits:
            train, test = splits["train"], splits["test"]
            try:
                check_disjoint([e.digest() for e in train], [e.digest() for e in test])
            except ValueError as e:
                log.warning("%s: the given splits share identical examples: %s", self.dataset_name, e)
        else:
            pool = splits.get("train") or splits.get("all") or next(iter(splits.values()))
            train, test = holdout(pool, c.test_fraction, c.split_seed)
            check_disjoint([e.digest() for e in train], [e.digest() for e in test])
        rng = np.random.default_rng([c.split_seed, 5])  # subsamples are the same in every run
        if c.max_per_category is not None:
            by_cat: dict[str, list[int]] = {}
            for i in rng.permutation(len(train)):
                by_cat.setdefault(train[i].category, []).append(int(i))
            train = [train[i] for i in sorted(i for ids in by_cat.values() for i in ids[: c.max_per_category])]
        if c.max_train_examples is not None and c.max_train_examples < len(train):
            train = [train[i] for i in np.sort(rng.permutation(len(train))[: c.max_train_examples])]
        if not train or not test:
            raise self.missing("an empty train or test split")
        return train, test

    def category_ids(self, train: list[Example], test: list[Example]) -> tuple[list[str], np.ndarray]:
        seen = sorted({e.category for e in train + test})
        names = list(self.categories) if set(seen) <= set(self.categories) else seen
        index = {n: i for i, n in enumerate(names)}
        return names, np.asarray([index[e.category] for e in train], dtype=np.int64)

    # ---------------------------------------------------------------- tokens
    def make_tokenizer(self, train: list[Example]):
        """tiny-llama: a word-level tokenizer trained on the training texts; else the model's own."""
        if self.config.model == TINY_LM:
            tok = word_tokenizer([self.prompt_text(e, False, None) + e.response for e in train],
                                 self.config.tiny_vocab, lm=True)
        else:
            tok = load_tokenizer(resolve_hf(self.config.model, "causal_lm"))
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        if tok.eos_token_id is None:
            raise UserError(f"--model {self.config.model}: its tokenizer has no end-of-sequence token")
        return tok

    def use_chat(self, tok) -> bool:
        fmt = self.config.prompt_format
        has_template = bool(getattr(tok, "chat_template", None))
        if fmt == "chat" and not has_template:
            raise UserError(f"prompt_format=chat, but the tokenizer of {self.config.model} has no chat template")
        return fmt == "chat" or (fmt == "auto" and has_template)

    def prompt_text(self, ex: Example, chat: bool, tok) -> str:
        if chat:
            user = ex.instruction + (f"\n\n{ex.context}" if ex.context else "")
            return tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                           add_generation_prompt=True)
        ctx = f"### {self.context_label}:\n{ex.context}\n\n" if ex.context else ""
        return f"### Instruction:\n{ex.instruction}\n\n{ctx}### Response:\n"

    def encode(self, tok, examples: list[Example], with_prompts: bool) -> PromptDataset:
        """input_ids / labels / attention_mask (N, seq_len), right-padded, labels masked on the
        prompt; with ``with_prompts`` also prompt_ids / prompt_mask (N, P) left-padded and
        ``ref`` (N,), the row of each example's reference. Cached on disk by the texts'
        content hash, the tokenizer's identity and the encoding options."""
        chat = self.use_chat(tok)
        prompts = [self.prompt_text(e, chat, tok) for e in examples]
        responses = [e.response for e in examples]
        blob = "\x1e".join(p + "\x1f" + r for p, r in zip(prompts, responses))
        parts = {"texts": hashlib.sha256(blob.encode("utf-8")).hexdigest(), "n": len(examples), "chat": chat,
                 "tokenizer": tokenizer_fingerprint(tok), "seq_len": self.config.seq_len, "prompts": with_prompts}
        tensors = cached_tensors(self.dataset_name, parts, len(examples),
                                 lambda: encode_pairs(tok, prompts, responses, chat, self.config.seq_len, with_prompts))
        return PromptDataset(tensors, responses, tok)

    def load(self) -> TaskData:
        """Read, check and encode the examples; ``info["tokenizer"]`` is what encoded them and
        the test split carries its reference responses (:class:`PromptDataset`)."""
        train, test = self.read_examples()
        names, ytr = self.category_ids(train, test)
        tok = self.make_tokenizer(train)
        check_model_limit("seq_len", self.config.seq_len, tok.model_max_length,
                          f"the tokenizer of --model {self.config.model}")
        log.info("%s: %d train / %d test examples, %d categories", self.dataset_name, len(train), len(test), len(names))
        return TaskData(train=self.encode(tok, train, False), test=self.encode(tok, test, True), train_labels=ytr,
                        n_classes=len(names),
                        info={"category_names": names, "tokenizer": tok, "n_train": len(train), "n_test": len(test)})

    # ---------------------------------------------------------------- model
    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        """The LM for ``data.info["tokenizer"]`` (tiny-llama: random init from a fixed seed)."""
        c = self.config
        check_arch(arch, self.dataset_name)
        tok = data.info["tokenizer"]
        if c.model == TINY_LM:
            model = tiny_lm(len(tok), c.seq_len + c.max_new_tokens, tok.pad_token_id, tok.bos_token_id,
                            tok.eos_token_id)
        else:
            from transformers import AutoModelForCausalLM

            model = load_hf_model(AutoModelForCausalLM, resolve_hf(c.model, "causal_lm"), dtype=torch.float32)
        positions = model.config.max_position_embeddings  # a prompt of <= seq_len tokens, then the generation
        check_model_limit("seq_len", c.seq_len, positions - 1, f"--model {c.model} ({positions} positions, one left "
                                                                f"to generate)")
        check_model_limit("max_new_tokens", c.max_new_tokens, positions - c.seq_len,
                          f"--model {c.model} after seq_len={c.seq_len} ({positions} positions)")
        blocks, targets = family_layout(model.config.model_type, LM_FAMILIES, "causal LM")
        check_targets(model, blocks, targets)
        if on_cuda_only(c.gradient_checkpointing, "gradient_checkpointing"):
            enable_gradient_checkpointing(model)
        train_head = c.model == TINY_LM if c.train_lm_head is None else c.train_lm_head
        if train_head and model.config.tie_word_embeddings:
            raise UserError("train_lm_head=true needs an untied output layer; this model ties it to the embeddings")
        return ModelBundle(model, blocks, targets, ["lm_head"] if train_head else [], default_target="qv")

    def autocast(self, t: torch.Tensor):
        if self.config.bf16 and t.is_cuda:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def loss(self, model, batch):
        """Mean next-token cross-entropy over the response tokens of the batch."""
        t = max(2, int(batch["attention_mask"].sum(1).max()))
        ids, mask = batch["input_ids"][:, :t].long(), batch["attention_mask"][:, :t].long()
        labels = batch["labels"][:, 1:t].long()  # (B, t-1): token k+1 is predicted at position k
        with self.autocast(ids):
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (B, t, V)
        pred = logits[:, :-1].float()
        return nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]), labels.reshape(-1),
                                           ignore_index=IGNORE), logits

    # ---------------------------------------------------------------- evaluation
    @torch.no_grad()
    def generate(self, model, tok, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """Greedy continuations (B, <= max_new_tokens) of left-padded prompts. The KV cache is
        used only when every block is in place (its layer indices follow the config)."""
        from transformers import GenerationConfig

        p = max(1, int(prompt_mask.sum(1).max()))
        ids, mask = prompt_ids[:, -p:].long(), prompt_mask[:, -p:].long()
        blocks, _ = family_layout(model.config.model_type, LM_FAMILIES, "causal LM")
        full_depth = block_count(model, blocks) == model.config.num_hidden_layers
        gen = GenerationConfig(max_new_tokens=self.config.max_new_tokens, do_sample=False, num_beams=1,
                               pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, use_cache=full_depth)
        with self.autocast(ids):
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
        return out[:, p:]

    @torch.no_grad()
    def predictions(self, model, dataset: PromptDataset, device) -> tuple[list[str], list[str]]:
        """Greedy generations and their references, decoded with the dataset's tokenizer."""
        tok = dataset.tokenizer
        idx = eval_indices(len(dataset), self.config.eval_max_examples)
        preds, refs = [], []
        for batch in iterate_batches(dataset, idx, self.config.eval_batch_size):
            refs += [dataset.references[int(r)] for r in batch["ref"]]
            batch = to_device(batch, device)
            out = self.generate(model, tok, batch["prompt_ids"], batch["prompt_mask"]).cpu()
            preds += [s.strip() for s in tok.batch_decode(out, skip_special_tokens=True)]
        return preds, refs

    @torch.no_grad()
    def evaluate(self, model, dataset, device, domains=None, domain_names=None, **_):
        preds, refs = self.predictions(model, dataset, device)
        exact = float(np.mean([p == r for p, r in zip(preds, refs)]))
        return EvalResult("rouge_l", rouge_l(preds, refs), None, {"exact_match": exact, "n_eval": float(len(refs))})


@dataclass(frozen=True)
class DollyConfig(InstructionConfig):
    model: str | None = cfg_field("facebook/opt-1.3b", "HF causal LM id or folder, smollm2-135m (offline alias, "
                                                       "GGUF), or tiny-llama (random-init, 12 layers)")
    hf_id: str = cfg_field(DOLLY_HF_ID, "HF dataset id used when no --data-dir is given")


@TASKS.register("dolly", "Dolly-15k instruction tuning (8 categories), causal LM (Rouge-L of greedy generations)")
class Dolly(InstructionTask):
    config_cls = DollyConfig
    dataset_name = "dolly"
    fields = {"instruction": ("instruction",), "context": ("context",), "response": ("response",),
              "category": ("category",)}
    layout_hint = ("databricks-dolly-15k.jsonl (or train.jsonl + test.jsonl) rows "
                   "{\"instruction\", \"context\", \"response\", \"category\"}")
    categories = DOLLY_CATEGORIES


@dataclass(frozen=True)
class NaturalInstructionsConfig(InstructionConfig):
    model: str | None = cfg_field("datajuicer/LLaMA-1B-dj-refine-150B", "HF causal LM id or folder (Fed-HeLLo: "
                                  "the Llama-like DataJuicer-1B), smollm2-135m, or tiny-llama")
    hf_id: str = cfg_field(NI_HF_ID, "HF dataset id used when no --data-dir is given")


@TASKS.register("natural_instructions", "Natural Instructions (definition + input -> output), causal LM (Rouge-L)")
class NaturalInstructions(InstructionTask):
    config_cls = NaturalInstructionsConfig
    dataset_name = "natural_instructions"
    fields = {"instruction": ("definition",), "context": ("input", "inputs"), "response": ("output", "targets"),
              "category": ("task", "task_name")}
    context_label = "Input"
    layout_hint = ("train.jsonl + test.jsonl (or one .jsonl) rows {\"definition\", \"input\", \"output\", "
                   "\"task\"} (or the HF names inputs / targets / task_name)")
