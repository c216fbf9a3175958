"""Plots, CSV/JSON export and the CLI defaults of the leaderboard commands."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from fedbench.leaderboard.export import task_rows
from fedbench.runners.cli import build_parser, main
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
        assert (fh["n"], fh["seeds"], fh["mean"], fh["best"]) == (2, "0 1", 82.5, True)
        assert fh["ci95_half"] == pytest.approx(31.765, abs=1e-3)
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
    for cmd in ("plot", "export"):
        assert build_parser().parse_args([cmd]).out == "results/leaderboard"
    from fedbench.leaderboard.generate import REGENERATE

    assert REGENERATE == "fedbench leaderboard --records leaderboard/records --out leaderboard"


def _two_ratio_section():
    """tiny_text's fixtures plus a copy of fedra's runs relabelled 1:1:1: fedra then has rows
    under two resource labels, fed_hello and hetlora under one."""
    import copy

    from fedbench.leaderboard.generate import ok_sections

    records = load_records(RECORDS)
    extra = []
    for r in records:
        if r["run"]["task"] == "tiny_text" and r["run"]["method"] == "fedra":
            r = copy.deepcopy(r)
            r["run"]["roc"] = r["run"]["resource_label"] = "1:1:1"
            r["run"]["run_id"] += "-111"
            extra.append(r)
    return ok_sections("tiny_text", records + extra)[2][0]


def test_plot_names_show_the_resource_label_only_where_a_method_has_several():
    from fedbench.leaderboard.generate import ok_sections
    from fedbench.leaderboard.plots import plot_names, split_by_label

    # tiny_vision: fedavg under "-" and fedra under its capacity list: one label each, so no split
    vision = ok_sections("tiny_vision", load_records(RECORDS))[2][0]
    assert split_by_label(vision) == [] and plot_names(vision) == vision.names
    sec = _two_ratio_section()
    assert split_by_label(sec) == ["6:3:1", "1:1:1"]
    assert sorted(plot_names(sec).values()) == ["fed_hello 6:3:1", "fedra 1:1:1", "fedra 6:3:1", "hetlora 6:3:1"]


def test_curves_one_panel_per_ratio_and_one_colour_per_method():
    pytest.importorskip("matplotlib")
    from fedbench.leaderboard.plots import _curves, _pyplot, row_styles
    from fedbench.leaderboard.render import Fmt

    plt, sec = _pyplot(), _two_ratio_section()
    fig = _curves(plt, sec, "iid", Fmt(sec.metric), "tiny_text / iid")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["RoC 6:3:1", "RoC 1:1:1"]
    # 6:3:1 panel: fed_hello, fedra and hetlora have iid curves; 1:1:1: only the fedra copy
    assert sorted(line.get_label() for line in panels[0].lines) == ["fed_hello", "fedra", "hetlora"]
    assert [line.get_label() for line in panels[1].lines] == ["fedra"]
    fedra = {rk.label: style for rk, style in row_styles(plt, sec).items() if rk.method == "fedra"}
    assert fedra["6:3:1"] == fedra["1:1:1"]
    assert len({style for rk, style in row_styles(plt, sec).items() if rk.label == "6:3:1"}) == 3
    assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == ["fed_hello", "fedra", "hetlora"]
    plt.close(fig)


def test_tiers_one_bar_line_per_row_memory_in_mb():
    pytest.importorskip("matplotlib")
    from fedbench.leaderboard.plots import _pyplot, _tiers

    plt, sec = _pyplot(), _two_ratio_section()
    fig = _tiers(plt, sec, "iid", "tiny_text / iid")
    assert [ax.get_xlabel() for ax in fig.axes] == ["TFLOPs/step", "Mem GB", "MB/round"]  # one run peaks at 1.5 GB
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "fed_hello 6:3:1", "fedra 1:1:1", "fedra 6:3:1", "hetlora 6:3:1"]  # table order
    plt.close(fig)
    for runs in sec.runs.values():
        for r in runs:
            for t in r["cost"]["peak_mem_gb"]["by_tier"].values():
                t["mean"] = min(t["mean"], 0.5)
    fig = _tiers(plt, sec, "iid", "tiny_text / iid")
    assert fig.axes[1].get_xlabel() == "Mem MB"
    assert max(p.get_width() for p in fig.axes[1].patches) == 500.0  # 0.5 GB drawn as 500 MB
    plt.close(fig)
