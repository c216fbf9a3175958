"""A text record with no text (empty or whitespace) is named with its file and line, not
accepted silently (tasks/record_files.text_problem, used by every text task's row check)."""

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


def test_an_empty_instruction_response_is_named(tmp_path):
    from fedbench.tasks import TASKS

    task = TASKS.get("dolly")
    problem = task.row_problem(task.__new__(task), {"instruction": "say hi", "response": "", "context": ""})
    assert problem == "field 'response' is empty (no text)"
