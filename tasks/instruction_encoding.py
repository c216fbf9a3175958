"""Token tensors of instruction examples for causal-LM fine-tuning: next-token labels on
the response only (the prompt masked with ``IGNORE``), left-padded prompts for greedy
generation at evaluation, and the dataset type that keeps the reference responses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedbench.tasks.base import ArrayDataset

IGNORE = -100  # label of a position that is not scored (prompt, padding): cross_entropy's ignore_index


@dataclass
class PromptDataset(ArrayDataset):
    """Encoded examples plus what evaluation needs: each row's ``ref`` indexes
    ``references`` (the reference responses), decoded with ``tokenizer``. Subsets keep both."""

    references: list[str] = field(default_factory=list)
    tokenizer: Any = None

    def subset(self, idx) -> "PromptDataset":
        return PromptDataset(self.batch(idx), self.references, self.tokenizer)


def encode_pairs(tok, prompt_texts: list[str], response_texts: list[str], chat: bool, seq_len: int,
                 with_prompts: bool) -> dict[str, torch.Tensor]:
    """``prompt + response + EOS`` per example, cut to ``seq_len`` tokens (a long prompt loses
    its beginning, BOS kept; then the response is cut to what is left):

    - ``input_ids`` / ``labels`` / ``attention_mask`` (N, seq_len), right-padded, labels
      ``IGNORE`` on the prompt and the padding;
    - with ``with_prompts``: ``prompt_ids`` / ``prompt_mask`` (N, P) left-padded, and ``ref``
      (N,), the row of each example's reference response.

    A chat-template prompt carries its own special tokens (``add_special_tokens=False``).
    """
    T = seq_len
    prompts = tok(prompt_texts, add_special_tokens=not chat)["input_ids"]
    responses = tok(response_texts, add_special_tokens=False)["input_ids"]
    pad, eos = tok.pad_token_id, tok.eos_token_id
    n_ex = len(prompts)
    ids = np.full((n_ex, T), pad, dtype=np.int32)
    labels = np.full((n_ex, T), IGNORE, dtype=np.int32)
    mask = np.zeros((n_ex, T), dtype=np.int8)
    cut_prompts = []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        r = list(r) + [eos]
        room = T - min(len(r), max(1, T // 4))  # the prompt leaves room for >= 1 response token
        if len(p) > room:
            p = p[:1] + p[len(p) - room + 1:]  # keep BOS, drop the start of the prompt
        r = r[: T - len(p)]
        n = len(p) + len(r)
        ids[i, :n] = p + r
        labels[i, len(p):n] = r
        mask[i, :n] = 1
        cut_prompts.append(p)
    tensors = {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels),
               "attention_mask": torch.from_numpy(mask)}
    if with_prompts:
        P = max(len(p) for p in cut_prompts)
        pids = np.full((n_ex, P), pad, dtype=np.int32)
        pmask = np.zeros((n_ex, P), dtype=np.int8)
        for i, p in enumerate(cut_prompts):
            pids[i, P - len(p):] = p
            pmask[i, P - len(p):] = 1
        tensors.update(prompt_ids=torch.from_numpy(pids), prompt_mask=torch.from_numpy(pmask),
                       ref=torch.arange(n_ex))
    return tensors
