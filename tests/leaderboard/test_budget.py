"""Budget tables and the simulated-time plot (leaderboard/budget.py) on hand-built records."""

import importlib.util

import pytest

from fedbench.leaderboard.budget import budget_lines, cumulative, plot_simtime, score_within


def _rec(method, times, traffic, metrics, seed=0, target=None, devices=True):
    curve = [{"round": i + 1, "metric": m, "train_loss": None, "sim_seconds": t if devices else None,
              "dropped": [], "traffic_mb": b} for i, (t, b, m) in enumerate(zip(times, traffic, metrics))]
    return {"status": "ok", "run": {"task": "t", "method": method, "run_config": {"setting": "iid", "seed": seed},
                                    "resource_label": "devices a:1" if devices else "1:1",
                                    "devices": {"spec": "a:1"} if devices else None},
            "results": {"curve": curve, "metric_name": "top1", "target": target}}


def test_score_within_takes_the_last_round_inside_the_budget():
    curve = _rec("m", [1.0, 2.0, 3.0], [5, 5, 5], [0.1, None, 0.7])["results"]["curve"]
    assert cumulative(curve, "sim_seconds") == [1.0, 1.0 + 2.0, 1.0 + 2.0 + 3.0]
    assert score_within(curve, "sim_seconds", 3.0) == 0.1  # round 2 ends at 3 s but is not evaluated
    assert score_within(curve, "sim_seconds", 6.0) == 0.7
    assert score_within(curve, "traffic_mb", 4.0) is None


def test_quality_under_budget_uses_the_shortest_runs_totals():
    recs = [_rec("fast", [1.0, 1.0], [2, 2], [0.5, 0.6]), _rec("slow", [3.0, 3.0], [1, 1], [0.4, 0.9]),
            _rec("tiers", [0, 0], [1, 1], [0.99, 0.99], devices=False)]
    lines = budget_lines(recs)
    assert "within 2 simulated seconds" in lines[3] and "within 2 MB of traffic" in lines[3]
    assert "| iid | devices a:1 | fast | 1 | 0.6000 | 0.5000 |" in lines  # 2 s: both rounds; 2 MB: round 1
    assert "| iid | devices a:1 | slow | 1 | – | 0.9000 |" in lines  # nothing ends within 2 s
    assert not any("| tiers |" in l for l in lines)  # a tier run has no device


def test_cost_to_target_averages_the_runs_that_reached_it():
    hit = {"metric": 0.5, "reached": True, "round": 2, "sim_seconds": 4.0, "traffic_mb": 10.0}
    hit2 = {**hit, "round": 4, "sim_seconds": 8.0, "traffic_mb": 20.0}
    miss = {"metric": 0.5, "reached": False, "round": None, "sim_seconds": None, "traffic_mb": None}
    recs = [_rec("m", [1.0], [1], [0.1], seed=s, target=t) for s, t in enumerate((hit, hit2, miss))]
    lines = budget_lines(recs)
    assert f"| iid | devices a:1 | m | 0.5 | 2/3 | {(2 + 4) / 2:.1f} | {(4.0 + 8.0) / 2:.4g} | {(10 + 20) / 2:.4g} |" \
        in lines


def test_no_device_records_no_tables():
    assert budget_lines([_rec("m", [1.0], [1], [0.1], devices=False)]) == []


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_simtime_plot_is_written(tmp_path):
    from fedbench.leaderboard.plots import pyplot

    paths = plot_simtime(pyplot(), [_rec("m", [1.0, 2.0], [1, 1], [0.1, 0.2])], "t", tmp_path)
    assert [p.name for p in paths] == ["iid_simtime.png"] and paths[0].stat().st_size > 0
