"""Empty texts: a classification record with no text is named with its file and line, not
accepted silently (tasks/record_files.text_problem); an instruction record is refused only
when it has no text at all, and one with an empty response is dropped and counted
(tasks/instruction_examples), since real Dolly and Natural Instructions data has both."""

from __future__ import annotations

import json

import pytest

from fedbench.errors import UserError
from fedbench.tasks.ledgar import row_checker
from fedbench.tasks.record_files import read_records


def test_an_empty_ledgar_text_is_named_with_its_line(tmp_path):
    p = tmp_path / "train.jsonl"
    p.write_text(json.dumps({"text": "a clause", "label": 0}) + "\n" + json.dumps({"text": "  ", "label": 1}) + "\n")
    with pytest.raises(UserError, match=r"train.jsonl line 2: field 'text' is empty \(no text\)"):
        read_records(p, row_checker([], ""))


def _dolly(root, rows):
    from fedbench.tasks.instructions import Dolly, DollyConfig

    root.mkdir(parents=True, exist_ok=True)
    # the on-disk format of ../shared/data/instructions and the hub's databricks-dolly-15k.jsonl
    (root / "databricks-dolly-15k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Dolly(DollyConfig(data_dir=str(root), model="tiny-llama", test_fraction=0.2))


def _rows(n=20):
    return [{"instruction": f"Name thing {i}.", "context": "" if i % 3 else f"Thing {i} is a lamp.",
             "response": f"thing {i}", "category": "open_qa"} for i in range(n)]


def test_dolly_empty_context_is_valid_and_an_empty_response_is_dropped_and_counted(tmp_path, caplog):
    """Dolly's context is empty in most rows (valid); a row with an empty response is dropped,
    counted in one warning, and the rest train."""
    rows = _rows()
    rows[4]["response"] = ""
    rows[7]["response"] = "   "
    rows[9]["instruction"] = ""  # an empty instruction with a context and a response still trains
    task = _dolly(tmp_path / "d", rows)
    with caplog.at_level("WARNING"):
        train, test = task.read_examples()
    assert len(train) + len(test) == 18
    assert all(e.response for e in train + test)
    assert any(e.instruction == "" and e.context for e in train + test)
    warned = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert warned == ["dolly: all split: 2 of 20 rows dropped (an empty response: nothing to train or score on; "
                      "only a row with no text at all is refused)"]


def test_a_row_with_no_text_at_all_is_refused_with_its_line(tmp_path):
    rows = _rows()
    rows[5].update(instruction=" ", context="", response="")
    with pytest.raises(UserError, match=r"databricks-dolly-15k.jsonl line 6: no text: 'instruction', 'context' "
                                        r"and 'response' are all empty"):
        _dolly(tmp_path / "d", rows).read_examples()


def test_natural_instructions_empty_input_and_empty_targets(tmp_path, caplog):
    """NI rows (HF names): an empty ``inputs`` is valid, an empty ``targets`` list is an empty
    response (dropped), a ``targets`` of the wrong type is refused."""
    from fedbench.tasks.instructions import NaturalInstructions, NaturalInstructionsConfig

    def write(rows):
        root = tmp_path / "ni"
        root.mkdir(exist_ok=True)
        (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return NaturalInstructions(NaturalInstructionsConfig(data_dir=str(root), model="tiny-llama", test_fraction=0.2))

    rows = [{"definition": "Copy the input.", "inputs": f"word {i}" if i % 2 else "", "targets": [f"word {i}"],
             "task_name": "task001_copy"} for i in range(10)]
    rows[3]["targets"] = []
    with caplog.at_level("WARNING"):
        train, test = write(rows).read_examples()
    assert len(train) + len(test) == 9
    assert any("1 of 10 rows dropped" in r.getMessage() for r in caplog.records)
    rows[3]["targets"] = 5
    with pytest.raises(UserError, match=r"train.jsonl line 4: field 'targets' must be a string, got integer"):
        write(rows).read_examples()


def test_a_local_data_file_over_the_limit_is_one_line_before_it_is_read(tmp_path, monkeypatch):
    """A data file is read whole: one larger than ``DATA_MAX_BYTES`` (1 GiB; a 2 GB file was
    read into memory before) is refused with its size, before a byte is read."""
    from fedbench.tasks import record_files

    monkeypatch.setattr(record_files, "DATA_MAX_BYTES", 100)
    p = tmp_path / "train.jsonl"
    p.write_text(json.dumps({"text": "a clause " * 20, "label": 0}) + "\n")
    monkeypatch.setattr(type(p), "read_bytes", lambda self: pytest.fail("read past the limit"))
    with pytest.raises(UserError, match=r"train.jsonl: 205 bytes, more than the 100 a local data file may hold"):
        read_records(p, row_checker([], ""))
