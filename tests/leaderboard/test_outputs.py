"""Plots, CSV/JSON export and the CLI defaults of the leaderboard commands."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from fedbench.leaderboard.export import task_rows
from fedbench.runners.cli.cli import build_parser, main
from fedbench.records import load_records

RECORDS = Path(__file__).parent / "fixtures" / "records"


def test_plots_render_and_are_linked(tmp_path):
    pytest.importorskip("matplotlib")
    from fedbench.leaderboard.generate import generate

    paths = generate(RECORDS, tmp_path, plots=True)
    names = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.png"))
    assert names == sorted(f"{t}/{s}_{k}.png" for t, ss in (("tiny_text", ("iid", "20_1.0")),
                                                             ("tiny_vision", ("domain", "domain+dir_0.5_x5")))
                           for s in ss for k in ("curves", "pareto", "tiers"))
    for n in names:
        assert (tmp_path / n).stat().st_size > 5000
    text = (tmp_path / "tiny_text.md").read_text()
    assert "[iid_curves](tiny_text/iid_curves.png)" in text and "(tiny_text/20_1.0_tiers.png)" in text
    assert str(tmp_path) not in text and paths == sorted(paths)


def test_cli_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["plot", "--records", str(RECORDS), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "tiny_text" / "iid_curves.png").exists()


@pytest.mark.parametrize("per", ["cell", "run"])
def test_export_csv_json(tmp_path, per):
    assert main(["export", "--records", str(RECORDS), "--out", str(tmp_path), "--per", per]) == 0
    rows = json.loads((tmp_path / f"tiny_text.{per}.json").read_text())
    with open(tmp_path / f"tiny_text.{per}.csv", newline="") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert len(rows) == len(csv_rows) == {"cell": 5, "run": 6}[per]
    if per == "cell":
        fh = next(r for r in rows if r["method"] == "fed_hello" and r["setting"] == "iid")
        assert (fh["n"], fh["seeds"], fh["mean_pct"], fh["best"]) == (2, [0, 1], 82.5, True)
        assert next(r for r in csv_rows if r["method"] == "fed_hello" and r["setting"] == "iid")["seeds"] == "0 1"
        assert fh["ci95_half_pct"] == pytest.approx(31.765, abs=1e-3)
        assert fh["cost_tflops_per_step_strong"] == 6e-05 and fh["pareto"] is True
    else:
        assert {r["run_id"] for r in rows} == {
            f"tiny_text-{m}-{s}-s0" for m in ("fed_hello", "fedra") for s in ("iid", "20_1.0")} | {
            "tiny_text-fed_hello-iid-s1", "tiny_text-hetlora-iid-s0"}


def test_export_deterministic():
    records = load_records(RECORDS)
    expected = task_rows("tiny_text", records, "cell")
    shuffled = list(records)
    random.Random(3).shuffle(shuffled)
    assert task_rows("tiny_text", shuffled, "cell") == expected


def test_leaderboard_defaults_do_not_touch_committed_tables():
    args = build_parser().parse_args(["leaderboard"])
    assert (args.records, args.out) == ("results", "results/leaderboard")
    assert build_parser().parse_args(["plot"]).out == "results/leaderboard"
    assert build_parser().parse_args(["export"]).out is None  # beside the records: results-export
    from fedbench.leaderboard.generate import REGENERATE

    assert REGENERATE == "fedbench leaderboard --records leaderboard/records --out leaderboard"


def test_export_is_typed(tmp_path):
    """Numbers as numbers, the variant as a mapping, units in the cost names, the memory source."""
    from fedbench.leaderboard.export import export
    from fedbench.records import write_record

    from .test_generate import make
    from .test_groups import with_config

    root = tmp_path / "records"
    for s, (a, b) in enumerate(((0.5, 0.4), (0.6, 0.5), (0.7, 0.6))):  # b = a - 10 points every seed: t = -inf
        for lr, final in ((0.01, a), (0.1, b)):
            rec = with_config(make("fedavg", seed=s, final=final), lr=lr)
            rec["run"]["run_id"] += f"-{lr}"
            rec["cost"]["peak_mem_gb"]["mean"] = 0.25
            write_record(rec, root / f"{rec['run']['run_id']}.json")
    export(root, tmp_path / "out")
    rows = json.loads((tmp_path / "out" / "t.cell.json").read_text())
    best, behind = rows
    assert best["variant"] == {"lr": 0.01} and behind["variant"] == {"lr": 0.1}
    assert best["seeds"] == [0, 1, 2] and best["mean_pct"] == pytest.approx((50 + 60 + 70) / 3)
    assert behind["diff_to_best_pct"] == pytest.approx(-10.0) and behind["t"] is None and behind["behind_best"] is True
    assert best["cost_peak_mem_mb"] == 0.25 * 1000 and best["peak_mem_source"] == "accounted"  # 0.25 GB in MB
    assert not any(k.endswith("_gb") for k in best)
    assert {"cost_traffic_mb_per_client_round_weak", "cost_tflops_per_step", "cost_seconds_per_round"} <= set(best)
    with open(tmp_path / "out" / "t.cell.csv", newline="") as fh:
        first = next(csv.DictReader(fh))
    assert json.loads(first["variant"]) == {"lr": 0.01} and first["seeds"] == "0 1 2"


def test_export_round_trip_one_unit_per_quantity(tmp_path):
    """Per cell and per run give the same quantities in the same units: a cell's mean_pct is the
    mean of its runs' final_pct (both x100), its MB columns the mean of its runs' MB columns;
    the CSV holds what the JSON holds; nothing is written under the records folder."""
    import shutil

    from fedbench.leaderboard.export import default_out, export

    root = tmp_path / "records"
    shutil.copytree(RECORDS, root)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    written = export(root, per="cell") + export(root, per="run")
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # the records tree is untouched
    out = default_out(root)
    assert out == tmp_path / "records-export" and all(p.parent == out for p in written)
    cells = json.loads((out / "tiny_text.cell.json").read_text())
    runs = json.loads((out / "tiny_text.run.json").read_text())
    for cell in cells:
        mine = [r for r in runs if (r["row"], r["resource_label"], r["setting"]) ==
                (cell["row"], cell["resource_label"], cell["setting"])]
        assert sorted(r["seed"] for r in mine) == cell["seeds"]
        assert cell["mean_pct"] == pytest.approx(sum(r["final_pct"] for r in mine) / len(mine))
        assert 1 < cell["mean_pct"] <= 100  # percent, not a fraction
    rows = [r for r in runs if r["row"] == "fed_hello"]  # a row's cost: the mean over all of its runs
    cell = next(c for c in cells if c["row"] == "fed_hello")
    for col in ("cost_peak_mem_mb", "cost_traffic_mb_per_client_round", "cost_tflops_per_step"):
        vals = [r[col] for r in rows if r[col] is not None]
        assert cell[col] == pytest.approx(sum(vals) / len(vals)), col
    assert not [k for k in cells[0] if k.endswith("_gb")] and not [k for k in runs[0] if k.endswith("_gb")]
    with open(out / "tiny_text.run.csv", newline="") as fh:
        first = next(csv.DictReader(fh))
    assert float(first["final_pct"]) == pytest.approx(runs[0]["final_pct"])
    assert float(first["cost_peak_mem_mb"]) == pytest.approx(runs[0]["cost_peak_mem_mb"])


def test_export_refuses_to_write_into_the_records_folder(tmp_path, capsys):
    import shutil

    root = tmp_path / "records"
    shutil.copytree(RECORDS, root)
    for out in (root, root / "leaderboard"):
        assert main(["export", "--records", str(root), "--out", str(out)]) == 2
        assert "inside the records folder" in capsys.readouterr().err
    assert not list(root.rglob("*.csv")) and not (root / "leaderboard").exists()
    assert main(["export", "--records", str(root)]) == 0  # default: beside it
    assert (tmp_path / "records-export" / "tiny_text.cell.json").is_file()


def test_tasks_unusable_as_file_names_are_left_out_with_a_warning(caplog):
    from fedbench.leaderboard.sections import by_file_task

    recs = [{"run": {"task": t}} for t in ("b", "../x", "a", "b", ".hidden", "a/b")]
    with caplog.at_level("WARNING"):
        got = by_file_task(recs)
    assert list(got) == ["a", "b"] and [len(v) for v in got.values()] == [1, 2]
    assert sorted(caplog.messages) == [f"skipping task {t!r}: not usable as a file name"
                                       for t in sorted(("../x", ".hidden", "a/b"))]
