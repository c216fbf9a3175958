"""Claim files of the wrong shape are one line naming the file, the line and the key
(leaderboard/claims_schema.py), never a traceback; the committed files pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedbench.leaderboard.claims import load_claims, load_fixes, paper_names
from fedbench.runners.cli.cli import main

ROOT = Path(__file__).resolve().parents[2] / "leaderboard" / "claims"

GOOD_BLOCK = """  - table: T
    task: t
    method: a
    columns: {iid: IID}
    groups:
      - roc: "-"
        figures: {a: [1.0], b: [2.0]}
"""

BAD = {
    "a_list_not_a_mapping": ("- a\n- b\n", "p.yaml line 1: expected a mapping, got a list"),
    "blocks_a_number": ("paper: p\nblocks: 5\n", "line 2: blocks: expected a list, got 5"),
    "block_a_list": ("paper: p\nblocks:\n  - [table, T]\n", "line 3: blocks[1]: expected a mapping, got a list"),
    "null_group": ("paper: p\nblocks:\n" + GOOD_BLOCK.replace('      - roc: "-"\n        figures: {a: [1.0], b: [2.0]}\n',
                                                           "      - null\n"), "line 8: blocks[1].groups[1]: expected a mapping, got null"),
    "groups_a_mapping": ("paper: p\nblocks:\n" + GOOD_BLOCK.replace("    groups:\n", "    groups:\n      x: 1\n    g2:\n"),
                         "unknown key 'g2'"),
    "figures_a_list": ("paper: p\nblocks:\n" + GOOD_BLOCK.replace("figures: {a: [1.0], b: [2.0]}", "figures: [1, 2]"),
                       "line 9: blocks[1].groups[1].figures: expected a mapping, got a list"),
    "figure_a_word": ("paper: p\nblocks:\n" + GOOD_BLOCK.replace("[2.0]", "[high]"),
                      "expected a number or null, got 'high'"),
    "explained_by_a_string": ("paper: p\nblocks:\n" + GOOD_BLOCK + "        explained_by: {b: because}\n",
                              "line 10: blocks[1].groups[1].explained_by.b: expected a mapping, got 'because'"),
    "command_unknown_field": ("paper: p\nblocks:\n" + GOOD_BLOCK + "    command: fedbench sweep x --only clients={clients}\n",
                              "line 10: blocks[1].command: names {clients}, which not every group's 'where' gives"),
}


@pytest.mark.parametrize("case", BAD)
def test_wrong_shapes_are_one_line_with_the_line_number(case, tmp_path, capsys):
    text, says = BAD[case]
    (tmp_path / "p.yaml").write_text(text)
    code = main(["claims", "p", "--claims", str(tmp_path), "--records", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err and "Traceback" not in err, err


def test_a_fixes_file_of_the_wrong_shape_is_one_line(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text("paper: p\nblocks:\n" + GOOD_BLOCK)
    (tmp_path / "fixes.yaml").write_text("fixes:\n  - commit: abc\n    what: w\n")
    code = main(["claims", "p", "--claims", str(tmp_path), "--records", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "fixes file" in err and "line 2: fixes[1]: missing 'committed_at'" in err, err


def test_the_committed_claim_files_pass():
    assert all(load_claims(ROOT, p)[1] for p in paper_names(ROOT)) and load_fixes(ROOT)
