"""One budget per table and rows ranked within each group: on hand-built records and on every
committed leaderboard (a table that mixes round counts, or whose rows are not in rank order,
fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedbench.leaderboard.generate import render_task
from fedbench.leaderboard.render import render_section
from fedbench.leaderboard.sections import ok_sections
from fedbench.records import load_records

from .test_generate import make

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"


def avg_columns(markdown: str) -> list[list[str]]:
    """The Avg cells of every table with an Avg column, one list per table, in row order."""
    out, lines = [], markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| Method |") and line.rstrip().endswith("| Avg |"):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(row.strip().strip("|").split("|")[-1].strip().strip("*"))
            out.append(rows)
    return out


def assert_ranked(markdown: str, lower_better: bool = False) -> None:
    """Every table with an Avg column lists its rows best Avg first, the rows without one last."""
    for avgs in avg_columns(markdown):
        numbers = [float(a) for a in avgs if a != "-"]
        assert avgs[:len(numbers)] == [a for a in avgs if a != "-"], f"a row without Avg above one with: {avgs}"
        assert numbers == sorted(numbers, reverse=not lower_better), f"rows not ranked by Avg: {avgs}"


def assert_one_budget_per_table(records: list[dict], task: str) -> int:
    """Every ranked table of ``task`` holds the runs of one round count; returns the tables checked."""
    checked = 0
    for sec in ok_sections(task, records)[2]:
        for rows in render_section(sec, 2)[1]["tables"]:
            rounds = {r["run"]["run_config"]["rounds"] for rk in rows for r in sec.runs[rk]}
            assert len(rounds) == 1, f"{task}: a table mixes round counts {sorted(rounds)}: {rows}"
            checked += 1
    return checked


def _at(method, rounds, finals, label="6:3:1", metric="top1"):
    recs = [make(method, seed=s, final=f, label=label, metric=metric) for s, f in enumerate(finals)]
    for r in recs:
        r["run"]["run_config"]["rounds"] = rounds
        r["run"]["run_id"] += f"-{rounds}"
    return recs


def test_hand_built_budgets_get_a_table_each_ranked_within_each_group():
    recs = (_at("fed_hello", 50, [0.60, 0.62]) + _at("fed_hello", 10, [0.40, 0.42]) + _at("straggler", 50, [0.61, 0.63])
            + _at("exclusive", 10, [0.45, 0.47]) + _at("fedavg", 10, [0.30, 0.31], label="1:1:1")
            + _at("fedra", 10, [0.35, 0.36], label="1:1:1"))
    text = render_task("t", recs)
    assert_ranked(text)
    assert assert_one_budget_per_table(recs, "t") == 3  # rounds=10: 1:1:1 and 6:3:1; rounds=50: 6:3:1
    ten, fifty = text.split("## Budget: rounds=10")[1].split("## Budget: rounds=50")
    assert ten.index("**RoC 1:1:1**") < ten.index("**RoC 6:3:1**")
    ranked = ["fedra", "fedavg", "exclusive", "fed_hello"]  # 1:1:1, then 6:3:1, each by Avg
    assert re.findall(r"^\| ([a-z_]+) \|", ten.split("### Costs")[0], re.M) == ranked
    assert re.findall(r"^\| ([a-z_]+) \|", fifty.split("### Costs")[0], re.M) == ["straggler", "fed_hello"]
    # the 10-round fed_hello is not bold beside the 50-round straggler: each table has its own best
    assert "| **41.00**" not in ten and "| **62.00** |" in fifty


def test_lower_is_better_ranks_the_smallest_first():
    recs = _at("a", 10, [1.5, 1.6], metric="loss") + _at("b", 10, [1.2, 1.3], metric="loss")
    text = render_task("t", recs)
    assert_ranked(text, lower_better=True)
    assert text.index("| b |") < text.index("| a |")


def test_the_checks_catch_an_unranked_table():
    with pytest.raises(AssertionError, match="not ranked"):
        assert_ranked("| Method | iid | Avg |\n| :--- | ---: | ---: |\n| a | 1.00 | 1.00 |\n| b | 2.00 | 2.00 |\n")
    with pytest.raises(AssertionError, match="without Avg"):
        assert_ranked("| Method | iid | Avg |\n| :--- | ---: | ---: |\n| a | - | - |\n| b | 2.00 | 2.00 |\n")


@pytest.mark.skipif(not (ROOT / "records").is_dir(), reason="no committed records (not a source checkout)")
def test_committed_tables_hold_one_budget_each_and_are_ranked():
    records = load_records(ROOT / "records")
    tasks = sorted({r["run"]["task"] for r in records})
    assert sum(assert_one_budget_per_table(records, t) for t in tasks) > len(tasks)
    for task in tasks:
        assert_ranked((ROOT / f"{task}.md").read_text(encoding="utf-8"))
