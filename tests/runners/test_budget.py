"""Allocation from a device budget (runners/budget/allocation.py) and --devices runs (runners/budget/simtime.py)."""

import pytest

from fedbench.errors import UserError
from fedbench.methods.base import ClientPlan
from fedbench.runners.budget.allocation import Planner, allocate_devices, first_fit, ladder, lowest_placement
from fedbench.runners.budget.devices import Device
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.budget.simtime import probe_setup
from fedbench.runners.core.state import RoundLog
from fedbench.runners.outputs.summary import target_section

from smoke import SMALL_TASK_CONFIGS, one_per_family

RUN = {"rounds": 2, "clients": 6, "per_round": 6, "max_steps": 2}


def test_first_fit_takes_the_first_rung_within_budget():
    assert first_fit([10, 8, 6, 5], 9) == 1
    assert first_fit([10, 8, None, 5], 4) == 2  # a rung that skips the round costs nothing
    assert first_fit([10, 8], 7) is None


def test_ladder_goes_from_largest_down():
    assert ladder(2, 2) == [(2, 2), (2, 1), (1, 2), (1, 1)]


def test_lowest_placement_moves_layers_to_the_bottom_of_the_blocks():
    assert lowest_placement(ClientPlan(0, 0, (5, 9)), 12).train_layers == (0, 1)
    assert lowest_placement(ClientPlan(0, 0, (7, 9), blocks=(3, 7, 9)), 12).train_layers == (3, 7)


#: the planned methods, one per family in the default run (fed_hello, fedra's layer / depth
#: subsets, hetlora's ranks); inclusivefl and fed_pilot, of fedra's family, with ``-m slow``
BUDGET_METHODS = one_per_family(["fed_hello", "fedra", "hetlora", "inclusivefl", "fed_pilot"],
                                ("fed_hello", "fedra", "hetlora"))


def _planner(tmp_path, method):
    exp = Experiment(method, "tiny_text", {**RUN, "out": str(tmp_path)}, task_config=SMALL_TASK_CONFIGS["tiny_text"])
    exp.setup()
    return Planner(exp.spec.method_cls, exp.spec.method_config, probe_setup(exp.spec, exp.am, exp.task, exp.data)), \
        exp.am.bundle.n_layers


@pytest.mark.parametrize("method", BUDGET_METHODS)
def test_a_larger_budget_never_gets_a_smaller_allocation(tmp_path, method):
    planner, L = _planner(tmp_path, method)
    rungs = ladder(L, 16)
    costs = [planner.probe(*r).accounted_bytes or 0 for r in rungs]
    budgets = sorted({c for c in costs} | {min(costs) - 1, max(costs) + 1})
    picks = [first_fit(costs, b) for b in budgets]
    for smaller, larger in zip(picks, picks[1:]):  # index into the ladder: a lower index is a larger allocation
        assert smaller is None or (larger is not None and larger <= smaller)
    got = [planner.allocate(b, rungs) for b in budgets]
    assert [None if g is None else rungs.index((g.layers, g.rank)) for g in got] == picks


def test_a_device_that_cannot_hold_the_smallest_allocation_is_refused(tmp_path):
    planner, L = _planner(tmp_path, "fedra")
    dev = Device("watch", 0.001, {"fp32": 1.0}, 1.0, 1.0, "test")
    with pytest.raises(UserError, match="device 'watch' .* cannot hold fedra's smallest allocation") as e:
        allocate_devices(planner, {"watch": dev}, ladder(L, 16), "fedra")
    assert "\n" not in str(e.value)


CATALOG = ("small: {memory_gb: 0.0196, tflops: {fp32: 0.01}, uplink_mbps: 1, downlink_mbps: 5, source: test}\n"
           "mid: {memory_gb: 0.0201, tflops: {fp32: 0.02}, uplink_mbps: 2, downlink_mbps: 10, source: test}\n"
           "big: {memory_gb: 1, tflops: {fp32: 1}, uplink_mbps: 100, downlink_mbps: 100, source: test}\n")


def _device_run(tmp_path, method, **extra):
    cat = tmp_path / "devices.yaml"
    cat.write_text(CATALOG)
    run = {**RUN, "out": str(tmp_path / "out"), "devices": "small:1,mid:1,big:1", "device_catalog": str(cat), **extra}
    rec, _ = Experiment(method, "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["status"] == "ok", rec["error"]
    return rec


@pytest.mark.parametrize("method", BUDGET_METHODS)
def test_device_run_records_allocations_within_budgets(tmp_path, method):
    rec = _device_run(tmp_path, method)
    dev = rec["run"]["devices"]
    assert set(dev["allocation"]) == {"small", "mid", "big"}
    assert rec["run"]["resource_label"] == "devices small:1,mid:1,big:1"
    for name, a in dev["allocation"].items():
        assert a["accounted_bytes"] <= a["budget_gb"] * 1e9
        tier = str(a["tier"])
        measured = rec["cost"]["accounted_mem_gb"]["by_tier"][tier]["max"]
        assert measured <= a["budget_gb"], (name, measured)  # every client-round of the device fits it
        assert rec["run"]["tiers"][a["tier"]]["layers"] == a["layers"]
    assert all(isinstance(p["sim_seconds"], float) and p["sim_seconds"] > 0 for p in rec["results"]["curve"])


def test_time_to_target_is_the_sum_of_the_round_log(tmp_path):
    rec = _device_run(tmp_path, "fedra", rounds=3, target_metric=0.0)
    curve, target = rec["results"]["curve"], rec["results"]["target"]
    assert target["round"] == 1 and target["sim_seconds"] == curve[0]["sim_seconds"]
    logs = [RoundLog(1, 0.2, None, 0, 0, sim_seconds=1.5), RoundLog(2, 0.6, None, 0, 0, sim_seconds=2.0),
            RoundLog(3, 0.9, None, 0, 0, sim_seconds=4.0)]
    assert target_section(0.5, logs, [])["sim_seconds"] == 1.5 + 2.0
    assert target_section(0.95, logs, [])["sim_seconds"] is None
    no_devices = [RoundLog(1, 0.9, None, 0, 0)]
    assert target_section(0.5, no_devices, [])["sim_seconds"] is None


def test_runs_without_devices_have_no_simulated_time(tmp_path):
    rec, _ = Experiment("fedavg", "tiny_text", {**RUN, "out": str(tmp_path)},
                        task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["run"]["devices"] is None
    assert all(p["sim_seconds"] is None for p in rec["results"]["curve"])


def test_devices_and_roc_are_refused_together(tmp_path):
    with pytest.raises(UserError, match="--devices"):
        Experiment("fedavg", "tiny_text", {**RUN, "devices": "phone:1", "roc": "1:1"})
    with pytest.raises(UserError, match="needs --devices"):
        Experiment("fedavg", "tiny_text", {**RUN, "deadline": 5})
    with pytest.raises(UserError, match="--dynamic"):
        Experiment("fedavg", "tiny_text", {**RUN, "devices": "phone:1", "dynamic": True})
