"""Leaderboard markdown from result records, checked against golden files.

Fixtures: ``fixtures/records/<task>/<method>/<run_id>.json`` are small hand-made records
(2 tasks, 3 methods each side, 2 settings per task, one cell with 2 seeds, one failed
run); ``fixtures/golden/<task>.md`` is the expected output, reviewed by eye.

After an intended change of the output format, rewrite the golden files with::

    FEDBENCH_UPDATE_GOLDEN=1 python -m pytest tests/leaderboard

then review the diff of ``tests/leaderboard/fixtures/golden/`` before committing.
"""

from __future__ import annotations

import math
import os
import random
import re
from pathlib import Path

import pytest

from fedbench.leaderboard.generate import generate, render_task
from fedbench.leaderboard.groups import setting_sort_key
from fedbench.records import empty_record, load_records, validate_record

FIXTURES = Path(__file__).parent / "fixtures"
RECORDS = FIXTURES / "records"
GOLDEN = FIXTURES / "golden"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_rows(markdown: str, header_start: str = "| Method |") -> dict[tuple[str, str], dict[str, str]]:
    """The rows of the first run of tables whose header starts with ``header_start`` (the
    group tables of one budget, up to the next heading) as {(method, roc): {column: cell}};
    the RoC is the table's RoC column, else its group caption (``**RoC 6:3:1** ...``)."""
    rows: dict = {}
    roc = None
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and rows:
            break
        m = re.match(r"\*\*RoC (.*?)\*\* \(", line)
        if m:
            roc = m.group(1)
        if line.startswith(header_start):
            header = _cells(line)
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = _cells(lines[i])
                key = (cells[0], cells[1]) if "RoC" in header else (cells[0], roc)
                rows[key] = dict(zip(header, cells))
                i += 1
            continue
        i += 1
    if not rows:
        raise AssertionError(f"no table starting with {header_start!r}")
    return rows


# --------------------------------------------------------------------------- golden


def test_golden_files(tmp_path):
    written = generate(RECORDS, tmp_path)
    assert written == sorted(written)
    assert [p.name for p in written] == ["tiny_text.md", "tiny_vision.md"]
    if os.environ.get("FEDBENCH_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for p in written:
            (GOLDEN / p.name).write_bytes(p.read_bytes())
    assert sorted(p.name for p in GOLDEN.glob("*.md")) == [p.name for p in written]
    for p in written:
        assert p.read_bytes() == (GOLDEN / p.name).read_bytes(), (
            f"{p.name} differs from the golden file; if the change is intended, rerun with "
            "FEDBENCH_UPDATE_GOLDEN=1 and review the diff")


def test_deterministic_under_shuffling():
    records = load_records(RECORDS)
    expected = {task: render_task(task, records) for task in ("tiny_text", "tiny_vision")}
    for seed in range(5):
        shuffled = list(records)
        random.Random(seed).shuffle(shuffled)
        for task, text in expected.items():
            assert render_task(task, shuffled) == text


def test_no_paths_or_timestamps(tmp_path):
    for p in generate(RECORDS, tmp_path):
        text = p.read_text(encoding="utf-8")
        assert str(tmp_path) not in text and str(RECORDS) not in text
        assert "2025-01-01" not in text  # created_at of the fixtures is not shown


# --------------------------------------------------------------------------- cells


def test_mean_std_best_and_failed_excluded():
    text = render_task("tiny_text", load_records(RECORDS))
    rows = table_rows(text)
    assert list(rows) == [("fed_hello", "6:3:1"), ("fedra", "6:3:1"), ("hetlora", "6:3:1")]

    # fed_hello iid has seeds 0 and 1 with final 0.80 and 0.85: mean ± 95% CI half-width (n).
    mean = (80.0 + 85.0) / 2
    std = math.sqrt(((80.0 - mean) ** 2 + (85.0 - mean) ** 2) / (2 - 1))
    half = 12.706205 * std / math.sqrt(2)  # t(0.975, df=1)
    assert rows[("fed_hello", "6:3:1")]["iid"] == f"**{mean:.2f} ± {half:.2f} (2)**" == "**82.50 ± 31.77 (2)**"
    # fedra iid (0.825, one seed) ties with fed_hello's mean: both bold.
    assert rows[("fedra", "6:3:1")]["iid"] == "**82.50**"
    assert rows[("hetlora", "6:3:1")]["iid"] == "77.33"
    # Best of the 20/1.0 column is bold, the other is not.
    assert rows[("fed_hello", "6:3:1")]["20/1.0"] == "**75.12**"
    assert rows[("fedra", "6:3:1")]["20/1.0"] == "70.20"
    # Avg = mean of the row's cell means.
    assert rows[("fed_hello", "6:3:1")]["Avg"] == f"**{(mean + 75.12) / 2:.2f}**"
    assert rows[("fedra", "6:3:1")]["Avg"] == f"{(82.5 + 70.2) / 2:.2f}"

    # hetlora's 20/1.0 run failed: no cell, no Avg, costs from its ok run only.
    assert rows[("hetlora", "6:3:1")]["20/1.0"] == "-"
    assert rows[("hetlora", "6:3:1")]["Avg"] == "-"
    assert "no result for some setting" in text
    assert "from 7 result records" in text
    assert "Skipped 1 record that did not finish (1 failed)." in text

    # Costs (own table): mean over all of the row's ok runs.
    costs = table_rows(text.split("## Costs")[1])
    fh = costs[("fed_hello", "6:3:1")]
    assert fh["TFLOPs/step"] == f"{(2.1e-05 + 2.3e-05 + 2.2e-05) / 3:.4g}" == "2.2e-05"
    assert fh["s/round"] == f"{(0.5 + 0.7 + 0.6) / 3:.2f}"
    assert costs[("hetlora", "6:3:1")]["TFLOPs/step"] == "3.2e-05"
    # Per tier: weakest = tier 0 in all three runs; strongest (tier 2) only in iid seed 0.
    assert fh["TFLOPs/step weak"] == "2.2e-05" and fh["TFLOPs/step strong"] == "6e-05"
    assert fh["Mem weak"] == "12.4 MB" and fh["Mem strong"] == "1.5 GB"  # MB below 1 GB
    assert fh["Traffic/round strong"] == "1 MB" and costs[("fedra", "6:3:1")]["Traffic/round strong"] == "-"
    assert fh["Server TFLOPs"] == "0.0012" and fh["Server s"] == "0.75"
    assert costs[("hetlora", "6:3:1")]["Server s"] == "-"
    # Pareto on (Avg, weakest-tier TFLOPs/step): hetlora has no Avg; fed_hello beats fedra on both.
    assert [rk for rk, r in costs.items() if r["Pareto"] == "✓"] == [("fed_hello", "6:3:1")]


def test_per_domain_tables():
    text = render_task("tiny_vision", load_records(RECORDS))
    assert text.index("## Per-domain (domain)") < text.index("## Per-domain (domain+dir(0.5)x5)")
    dom = table_rows(text.split("## Per-domain (domain)")[1])
    assert dom[("fedra", "12,10,8,6,4,3")]["sketch"] == "**58.75**"  # best of its resource label (cohort)
    assert dom[("fedavg", "-")]["real"] == "**72.00**"
    assert dom[("fedra", "12,10,8,6,4,3")]["Avg"] == f"**{(55.0 + 70.0 + 58.75) / 3:.2f}**"  # its cohort's best


# --------------------------------------------------------------------------- in-memory records


def make(method="fedra", setting="iid", seed=0, final=0.5, *, task="t", metric="top1", label="6:3:1",
         status="ok", tflops=1e-5, per_domain=None) -> dict:
    rec = empty_record()
    rec["status"] = status
    rec["run"].update(run_id=f"{method}-{setting}-{seed}-{metric}", method=method, task=task,
                      resource_label=label, rounds_completed=1)
    rec["run"]["run_config"].update(setting=setting, seed=seed, rounds=1)
    rec["results"].update(metric_name=metric, final=final, per_domain=per_domain)
    rec["cost"]["tflops_per_step"]["mean"] = tflops
    validate_record(rec)
    return rec


def test_setting_order_iid_first():
    settings = ["dir(0.5)", "20/1.0", "iid", "10/1.0", "domain"]
    assert sorted(settings, key=setting_sort_key) == ["iid", "10/1.0", "20/1.0", "dir(0.5)", "domain"]
    text = render_task("t", [make(setting=s) for s in settings])
    assert "| Method | iid | 10/1.0 | 20/1.0 | dir(0.5) | domain | Avg |" in text


def test_rows_sorted_by_method_then_label():
    recs = [make("hetlora", label="6:3:1"), make("fedra", label="6:3:1"), make("fedra", label="1:1:1"),
            make("fedavg", label="")]
    assert list(table_rows(render_task("t", recs))) == [
        ("fedavg", "-"), ("fedra", "1:1:1"), ("fedra", "6:3:1"), ("hetlora", "6:3:1")]


def test_mixed_metrics_get_one_table_each():
    recs = [make("fedra", metric="top1", final=0.5), make("fedra", metric="macro_f1", final=0.25),
            make("fedavg", metric="loss", final=1.5), make("fedra", metric="loss", final=1.25)]
    text = render_task("t", recs)
    assert "Metrics: `loss` (lower is better), `macro_f1` (%, higher is better), `top1` (%, higher is better)." in text
    assert text.index("## loss") < text.index("## macro_f1") < text.index("## top1")
    loss = table_rows(text.split("## loss")[1])
    assert loss[("fedra", "6:3:1")]["iid"] == "**1.25**"  # lower is better; not a percent metric
    assert loss[("fedavg", "6:3:1")]["iid"] == "1.5"
    assert table_rows(text.split("## macro_f1")[1])[("fedra", "6:3:1")]["iid"] == "**25.00**"


def test_other_task_and_all_failed():
    recs = [make(task="other"), make(status="failed", final=None), make(status="cancelled", final=None)]
    text = render_task("t", recs)
    assert "from 2 result records" in text and "none finished" in text
    assert "Skipped 2 records that did not finish (1 cancelled, 1 failed)." in text
    assert "| Method |" not in text


def test_pipe_in_names_is_escaped():
    text = render_task("t", [make("a|b")])
    assert "| a\\|b | 6:3:1 |" in text


def test_generate_writes_only_tasks_present(tmp_path):
    out = tmp_path / "out"
    (out).mkdir()
    (out / "keep.md").write_text("untouched")
    paths = generate(RECORDS, out)
    assert sorted(p.name for p in out.iterdir()) == ["keep.md", "tiny_text.md", "tiny_vision.md"]
    assert all(p.parent == out for p in paths)
    assert (out / "keep.md").read_text() == "untouched"


@pytest.mark.parametrize("value,shown", [(3.2e-05, "3.2e-05"), (1.62, "1.62"), (0.0012345678, "0.001235"),
                                         (123.456, "123.5")])
def test_tflops_format(value, shown):
    costs = table_rows(render_task("t", [make(tflops=value)]).split("## Costs")[1])
    assert costs[("fedra", "6:3:1")]["TFLOPs/step"] == shown


def test_runs_scored_on_different_test_examples_are_flagged():
    a, b, c = make("fedavg"), make("fed_hello"), make("fedra", setting="20/1.0")
    for rec, held in ((a, [1, 2]), (b, [1, 2]), (c, [5])):
        rec["run"]["holdout_indices"] = held
    assert "Not strictly comparable" not in render_task("t", [a, b, c])
    b["run"]["holdout_indices"] = [1, 3]
    text = render_task("t", [a, b, c])
    assert "Not strictly comparable" in text and "iid seed 0" in text and "20/1.0" not in text.split("Not strictly")[1]
    assert table_rows(text)[("fed_hello", "6:3:1")]["iid"]  # still shown


def test_avg_is_bold_per_cohort():
    """Each resource label's best Avg is bold, as its cells are (not only the table's best)."""
    recs = [make("fedra", label="6:3:1", final=0.5), make("hetlora", label="6:3:1", final=0.25),
            make("fedra", label="1:1:1", final=0.75), make("hetlora", label="1:1:1", final=0.125)]
    rows = table_rows(render_task("t", recs))
    assert rows[("fedra", "6:3:1")]["Avg"] == "**50.00**" and rows[("fedra", "6:3:1")]["iid"] == "**50.00**"
    assert rows[("fedra", "1:1:1")]["Avg"] == "**75.00**"
    assert rows[("hetlora", "6:3:1")]["Avg"] == "25.00" and rows[("hetlora", "1:1:1")]["Avg"] == "12.50"
