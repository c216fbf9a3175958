"""natural_instructions: a tiny NI JSONL (``definition / input / output / task``; also the
HF field names), task-skew partitions, end to end through Experiment with a tiny LM."""

import json
from pathlib import Path

import pytest

from fedbench.errors import UserError
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks.instructions import NaturalInstructions, NaturalInstructionsConfig

TASKS = ["task001_reverse", "task002_upper", "task003_first_word", "task004_count", "task005_copy"]


def ni_rows(split: str, n_per_task: int, hf_names: bool = False) -> list[dict]:
    rows = []
    for t, name in enumerate(TASKS):
        for i in range(n_per_task):
            x = f"alpha beta gamma {split} {i} {t}"
            out = [x.upper()] if i % 2 else x.upper()  # NI stores outputs as a list
            if hf_names:
                rows.append({"definition": f"Apply {name}.", "inputs": x, "targets": x.upper(), "task_name": name})
            else:
                rows.append({"definition": f"Apply {name}.", "input": x, "output": out, "task": name})
    return rows


def write_ni(root: Path, hf_names: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 8), ("test", 2)):
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ni_rows(split, n, hf_names)))
    return root


def test_task_skew_rounds_report_rouge_l(tmp_path):
    root = write_ni(tmp_path / "ni")
    run = dict(setting="2/1.0", clients=4, per_round=2, rounds=2, batch_size=8, max_steps=2, lr=3e-3,
               measure_flops=False, out=str(tmp_path / "out"))
    tc = dict(data_dir=str(root), model="tiny-llama", seq_len=48, max_new_tokens=8)
    runner = Experiment("fedavg", "natural_instructions", run, task_config=tc)
    rec, _ = runner.run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["results"]["metric_name"] == "rouge_l" and 0.0 <= rec["results"]["final"] <= 1.0
    assert runner.data.info["category_names"] == TASKS  # tasks are the partition's categories
    assert all(len(set(runner.data.train_labels[ix])) <= 2 for ix in runner.fed.part.client_indices)


def test_hf_field_names_and_input_label(tmp_path):
    t = NaturalInstructions(NaturalInstructionsConfig(data_dir=str(write_ni(tmp_path / "ni", hf_names=True)),
                                                      model="tiny-llama", prompt_format="template"))
    train, test = t.read_examples()
    assert (len(train), len(test)) == (40, 10)
    assert train[0].context.startswith("alpha") and train[0].response == train[0].context.upper()
    assert "### Input:\n" in t.prompt_text(train[0], chat=False, tok=None)


def test_per_task_cap(tmp_path):
    t = NaturalInstructions(NaturalInstructionsConfig(data_dir=str(write_ni(tmp_path / "ni")), model="tiny-llama",
                                                      max_per_category=3))
    train, _ = t.read_examples()
    assert len(train) == 3 * len(TASKS)


def ni(root: Path) -> NaturalInstructions:
    return NaturalInstructions(NaturalInstructionsConfig(data_dir=str(root), model="tiny-llama", seq_len=48,
                                                         max_new_tokens=4))


GOOD = json.dumps({"definition": "Copy.", "input": "a b", "output": ["a b"], "task": "task005_copy"}) + "\n"
BAD_INPUT = {  # case -> (file, content as bytes, what the message must say)
    "no text fields": ("train.jsonl", (GOOD + json.dumps({"prompt": "x", "completion": "y"}) + "\n").encode(),
                       r"train\.jsonl line 2: missing field 'definition'"),
    "output not text": ("test.jsonl", (GOOD + json.dumps({"definition": "x", "output": {"a": 1}}) + "\n").encode(),
                        r"test\.jsonl line 2: field 'output' must be a string, got object"),
    "not an object": ("train.jsonl", (GOOD + "null\n").encode(), r"train\.jsonl line 2: expected a JSON object, got null"),
    "malformed line": ("test.jsonl", (GOOD + "{oops}\n").encode(), r"test\.jsonl line 2 column \d+: malformed JSON"),
    "not utf-8": ("train.jsonl", GOOD.encode() * 2 + b"\xc3(\n", r"train\.jsonl line 3: not UTF-8 text"),
    "empty": ("test.jsonl", b"", r"test\.jsonl is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_names_file_and_line(tmp_path, case):
    name, content, message = BAD_INPUT[case]
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text(GOOD)
    (tmp_path / name).write_bytes(content)
    with pytest.raises(UserError, match=message) as e:
        ni(tmp_path).load()
    assert "\n" not in str(e.value) and str(tmp_path / name) in str(e.value)
    assert "Muennighoff" not in str(e.value)  # no download hint when --data-dir was given


def test_build_model_from_data_only(tmp_path):
    data = ni(write_ni(tmp_path / "ni")).load()
    bundle = ni(tmp_path / "ni").build_model(data)
    assert bundle.n_layers == 12 and bundle.model.config.vocab_size == len(data.info["tokenizer"])
