"""Plots that stay readable with many methods: small multiples by method family (a crowded
family over several panels), each group on its own axes, distinct colours within a panel,
labels in a margin off every marker, one legend, curves only where there is a curve, titles
that say what a setting means; ``fedbench plot`` links its PNGs into the tables."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from fedbench.leaderboard.plot_costs import weak_front
from fedbench.leaderboard.plot_style import PALETTE, row_colours, style_names
from fedbench.leaderboard.sections import ok_sections
from fedbench.records import load_records
from fedbench.runners.cli.cli import main

from .test_generate import make
from .test_notes import tiered_record

RECORDS = Path(__file__).parent / "fixtures" / "records"


def _two_ratio_section():
    """tiny_text's fixtures plus a copy of fedra's runs relabelled 1:1:1: fedra (layer / depth
    subsets) under two resource labels, fed_hello (Fed-HeLLo) and hetlora (rank) under one."""
    records = load_records(RECORDS)
    extra = []
    for r in records:
        if r["run"]["task"] == "tiny_text" and r["run"]["method"] == "fedra":
            r = copy.deepcopy(r)
            r["run"]["run_config"]["roc"] = r["run"]["resource_label"] = "1:1:1"
            r["run"]["run_id"] += "-111"
            extra.append(r)
    return ok_sections("tiny_text", records + extra)[2][0]


def test_colours_distinct_within_a_family_and_kept_across_ratios():
    recs = [make(m, label=label) for m in ("fed_hello", "fed_hello_fim", "fed_hello_rgd", "fed_hello_gd_triangle",
                                           "fed_hello_gd_inverted", "fed_hello_gd_bottleneck", "fed_hello_gd_uniform",
                                           "fedra", "hetlora") for label in ("6:3:1", "1:1:1")]
    sec = ok_sections("t", recs)[2][0]
    colours = row_colours(sec)
    hello = {rk.method: colours[rk] for rk in sec.rows if rk.method.startswith("fed_hello")}
    assert len(set(hello.values())) == 7 and all(c in PALETTE for c, _ in hello.values())
    for rk in sec.rows:  # one method, one colour under both ratios
        assert colours[rk] == colours[next(r for r in sec.rows if r.method == rk.method)]
    assert set(style_names(sec.rows).values()) == {rk.method for rk in sec.rows}


def test_curves_small_multiples_one_row_per_family_one_column_per_ratio():
    pytest.importorskip("matplotlib")
    from fedbench.leaderboard.plot_curves import curves
    from fedbench.leaderboard.plots import pyplot

    plt, sec = pyplot(), _two_ratio_section()
    fig = curves(plt, sec, "iid", "tiny_text / iid")
    grid = [ax for ax in fig.axes]
    assert len(grid) == 3 * 2  # layer / depth, rank, Fed-HeLLo x RoC 1:1:1, 6:3:1
    assert [ax.get_title() for ax in grid[:2]] == ["RoC 1:1:1", "RoC 6:3:1"]
    assert [ax.get_ylabel().split("\n")[0] for ax in grid[::2]] == ["layer / depth subsets", "rank heterogeneity",
                                                                    "Fed-HeLLo"]
    fedra_631 = grid[1]  # layer / depth subsets, RoC 6:3:1: fedra in colour, named at its end; the rest grey
    assert [t.get_text() for t in fedra_631.texts] == ["fedra"]
    assert sum(line.get_color() != "#c8c8c8" for line in fedra_631.lines) == 1
    assert sum(line.get_color() == "#c8c8c8" for line in fedra_631.lines) == 2  # fed_hello, hetlora
    assert [t.get_text() for t in grid[4].texts] == ["no runs"]  # Fed-HeLLo has no 1:1:1 runs
    assert len(fig.legends) == 1  # one legend: what line, band and grey mean; the methods are named on the plot
    assert [t.get_text() for t in fig.legends[0].get_texts()][2] == "grey: the group's other methods"
    plt.close(fig)


def _labels_right_of_every_point(ax) -> bool:
    """Every named label of ``ax`` starts right of every drawn point (no label covers a marker)."""
    xs = [x for line in ax.lines for x in line.get_xdata()]
    xs += [x for coll in ax.collections for x, _ in coll.get_offsets()]
    names = [t for t in ax.texts if t.get_text() != "no runs"]
    return all(t.xyann[0] > max(xs) for t in names) if names and xs else True


def _budgets(rounds_of: dict, label="6:3:1"):
    """Records with a curve per round: method -> its rounds; finals rise with the round."""
    recs = []
    for method, rounds in rounds_of.items():
        for seed in (0, 1):
            r = make(method, seed=seed, final=0.5, label=label)
            r["run"]["run_config"]["rounds"] = rounds
            r["run"]["run_id"] += f"-{rounds}"
            r["results"]["curve"] = [{"round": k, "metric": k / (2 * rounds), "train_loss": None}
                                     for k in range(1, rounds + 1)]
            recs.append(r)
    return ok_sections("t", recs)[2][0]


def test_curves_put_each_budget_on_its_own_round_axis_and_split_a_crowded_family():
    """A 10-round and a 50-round group: each column's round axis fits its own budget. Seven
    Fed-HeLLo methods: two panels (4 + 3 lines), every name right of every curve."""
    pytest.importorskip("matplotlib")
    from fedbench.leaderboard.plot_curves import curves
    from fedbench.leaderboard.plots import pyplot

    hello = ["fed_hello", "fed_hello_fim", "fed_hello_rgd", "fed_hello_gd_triangle", "fed_hello_gd_inverted",
             "fed_hello_gd_bottleneck", "fed_hello_gd_uniform"]
    plt, sec = pyplot(), _budgets({**{m: 10 for m in hello}, "straggler": 50})
    fig = curves(plt, sec, "iid", "t / iid")
    axes = fig.axes
    assert [ax.get_title() for ax in axes[:2]] == ["RoC 6:3:1, rounds=10", "RoC 6:3:1, rounds=50"]
    assert [ax.get_ylabel().split("\n")[0] for ax in axes[::2]] == ["baselines", "Fed-HeLLo (1 of 2)",
                                                                   "Fed-HeLLo (2 of 2)"]
    ten, fifty = axes[0], axes[1]
    assert ten.get_xlim()[1] < 10 * 1.5 and fifty.get_xlim()[1] > 50  # not squeezed onto one axis
    assert len([t for t in axes[2].texts]) == 4 and len([t for t in axes[4].texts]) == 3
    assert all(_labels_right_of_every_point(ax) for ax in axes)
    plt.close(fig)


def test_curves_draw_in_each_block_only_the_families_with_a_run_in_its_groups():
    """Four groups (budgets 10-40 rounds), one method each: a block of three columns, then one
    below. The first block draws layer / depth, rank and Fed-HeLLo (no baseline runs in its
    groups), the second only the baselines: 4 rows of panels, not 4 families x 2 blocks."""
    pytest.importorskip("matplotlib")
    from fedbench.leaderboard.plot_curves import curves
    from fedbench.leaderboard.plots import pyplot

    plt, sec = pyplot(), _budgets({"fedra": 10, "hetlora": 20, "fed_hello": 30, "straggler": 40})
    fig = curves(plt, sec, "iid", "t / iid")
    axes = fig.axes
    assert len(axes) == (3 + 1) * 3
    assert [ax.get_ylabel().split("\n")[0] for ax in axes[::3]] == ["layer / depth subsets", "rank heterogeneity",
                                                                   "Fed-HeLLo", "baselines"]
    assert [ax.get_title() for ax in axes[:3]] == [f"RoC 6:3:1, rounds={n}" for n in (10, 20, 30)]
    assert axes[9].get_title() == "RoC 6:3:1, rounds=40" and [t.get_text() for t in axes[9].texts] == ["straggler"]
    assert not axes[10].get_visible() and not axes[11].get_visible()  # the last block's empty columns
    assert axes[2].get_xlabel() == "" and axes[8].get_xlabel() == "round"  # the first block's last row
    plt.close(fig)


def test_curves_need_three_points_and_fedbench_plot_links_the_pngs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    root = tmp_path / "records"
    shutil.copytree(RECORDS / "tiny_vision", root / "tiny_vision")
    for path in (root / "tiny_vision").rglob("*.json"):
        rec = json.loads(path.read_text())
        if rec["run"]["setting"] == "domain":
            rec["results"]["curve"] = rec["results"]["curve"][-2:]
        path.write_text(json.dumps(rec))
    out = tmp_path / "out"
    (out / "tiny_vision").mkdir(parents=True)
    (out / "tiny_vision" / "domain_curves.png").write_bytes(b"left by an older run")
    assert main(["plot", "--records", str(root), "--out", str(out)]) == 0
    pngs = sorted(p.name for p in (out / "tiny_vision").iterdir())
    assert pngs == ["domain+dir_0.5_x5_curves.png", "domain+dir_0.5_x5_pareto.png", "domain+dir_0.5_x5_tiers.png",
                    "domain_pareto.png", "domain_tiers.png"]
    table = (out / "tiny_vision.md").read_text()
    assert "[domain_pareto](tiny_vision/domain_pareto.png)" in table and "domain_curves" not in table
    assert str(out / "tiny_vision.md") in capsys.readouterr().out


def test_plot_titles_say_what_the_setting_means():
    from fedbench.leaderboard.plot_style import title

    sec = ok_sections("t", [make(setting="2/-")])[2][0]
    assert title(sec, "2/-", False) == "t / 2/- (2 classes per client, equal shares)"
    assert title(sec, "odd", True) == "t / odd / top1"


def test_pareto_keeps_an_idle_weakest_tier_off_the_front():
    recs = [tiered_record("exclusive", 0.9, (2,), (0.0, 0.0, 1.25)),
            tiered_record("fedavg", 0.8, (0, 1, 2), (1.25,) * 3),
            tiered_record("all_small", 0.5, (0, 1, 2), (0.66,) * 3)]
    sec = ok_sections("t", recs)[2][0]
    points, front, idle = weak_front(sec, "iid", "traffic_mb_per_client_round", "total")
    by = {rk.method: rk for rk in sec.rows}
    assert points[by["exclusive"]] == (90.0, 0.0)  # drawn where it is ...
    assert idle == {by["exclusive"]} and front == {by["fedavg"], by["all_small"]}  # ... but off the front
    points, front, idle = weak_front(sec, "iid", "tflops_per_step", "mean")
    assert by["exclusive"] not in points and front == {by["fedavg"]}  # same weak TFLOPs: the higher quality wins


def test_pareto_axes_name_units_and_memory_source():
    pytest.importorskip("matplotlib")
    from fedbench.leaderboard.plot_costs import pareto
    from fedbench.leaderboard.plots import pyplot

    plt, sec = pyplot(), _two_ratio_section()
    fig = pareto(plt, sec, "iid", "tiny_text / iid")
    labels = [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()]
    assert labels == ["weakest-tier TFLOPs/step", "weakest-tier peak memory, MB (accounted)",
                      "weakest-tier traffic per round, MB"]
    # one row per group, named over its first panel (read across); one legend naming the families and the marks
    assert [ax.get_title(loc="left") for ax in fig.axes[::3]] == ["RoC 1:1:1", "RoC 6:3:1"]
    assert [ax.get_ylabel() for ax in fig.axes[::3]] == ["macro_f1 (%)", "macro_f1 (%)"]
    assert len(fig.legends) == 1
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts[:3] == ["layer / depth subsets", "rank heterogeneity", "Fed-HeLLo"]
    assert "filled: on its group's Pareto front" in texts and "hollow: off it" in texts
    # the 1:1:1 row compares fedra alone; names sit right of every point
    assert [t.get_text() for t in fig.axes[0].texts] == ["fedra"]
    assert all(_labels_right_of_every_point(ax) for ax in fig.axes)
    plt.close(fig)
