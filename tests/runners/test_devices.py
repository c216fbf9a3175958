"""Device catalogue, --devices parsing and the simulated clock (runners/budget/devices.py, simtime.py)."""

import pytest

from fedbench.errors import UserError
from fedbench.runners.budget.devices import Device, client_seconds, load_catalog, parse_devices
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.budget.simtime import SimClock

CAT = {n: Device(n, g, {"fp32": 1.0}, 4.0, 8.0, "test") for n, g in (("a", 1.0), ("b", 2.0), ("c", 4.0))}


def test_shipped_catalogue_names_sources():
    cat = load_catalog()
    assert {"phone", "laptop", "workstation"} <= set(cat)
    assert all(d.source and d.memory_gb > 0 and d.tflops["fp32"] > 0 for d in cat.values())


def test_user_catalogue_adds_and_overrides(tmp_path):
    f = tmp_path / "dev.yaml"
    f.write_text("phone: {memory_gb: 2, tflops: {fp32: 1}, uplink_mbps: 1, downlink_mbps: 2, source: mine}\n"
                 "tiny: {memory_gb: 0.5, tflops: {fp32: 0.1}, uplink_mbps: 1, downlink_mbps: 1, source: mine}\n")
    cat = load_catalog(str(f))
    assert cat["phone"].memory_gb == 2 and cat["tiny"].memory_bytes == 5 * 10**8 and "laptop" in cat


@pytest.mark.parametrize("text, words", [
    ("x: {memory_gb: 0, tflops: {fp32: 1}, uplink_mbps: 1, downlink_mbps: 1, source: s}", "memory_gb"),
    ("x: {memory_gb: 1, tflops: {fp8: 1}, uplink_mbps: 1, downlink_mbps: 1, source: s}", "tflops"),
    ("x: {memory_gb: 1, tflops: {fp32: 1}, uplink_mbps: 1, downlink_mbps: 1}", "lacks"),
    ("x: {memory_gb: 1, tflops: {fp32: 1}, uplink_mbps: 1, downlink_mbps: 1, source: ' '}", "source"),
])
def test_bad_catalogue_entry_is_one_line(tmp_path, text, words):
    f = tmp_path / "dev.yaml"
    f.write_text(text + "\n")
    with pytest.raises(UserError, match=words) as e:
        load_catalog(str(f))
    assert "\n" not in str(e.value)


def test_shares_give_exact_counts():
    devs = parse_devices("a:6,b:3,c:1", 10, CAT, seed=0)
    assert [devs.count(n) for n in "abc"] == [6, 3, 1]
    devs = parse_devices("a:1,b:1,c:1", 10, CAT, seed=0)
    assert [devs.count(n) for n in "abc"] == [4, 3, 3]  # the remainder goes to the lower class first


def test_per_client_list_is_cycled():
    assert parse_devices("a,c", 5, CAT, seed=0) == ["a", "c", "a", "c", "a"]


@pytest.mark.parametrize("spec, words", [("a:1,b", "not both"), ("z:1", "unknown device class 'z'"),
                                         ("a:x", "numbers"), ("a:1,a:2", "twice"), ("", "malformed")])
def test_bad_devices_are_refused(spec, words):
    with pytest.raises(UserError, match=words):
        parse_devices(spec, 4, CAT, seed=0)


def test_client_seconds_is_compute_plus_transfer():
    dev = Device("d", 1.0, {"fp32": 2.0}, 4.0, 8.0, "test")  # 2 TFLOP/s, up 4 Mbit/s, down 8 Mbit/s
    s = client_seconds(dev, 6e12, down_bytes=2_000_000, up_bytes=1_000_000)
    assert s["compute"] == 6e12 / 2e12
    assert s["down"] == 2_000_000 * 8 / 8e6 and s["up"] == 1_000_000 * 8 / 4e6
    assert s["total"] == 3.0 + 2.0 + 2.0


def _cost(client, flops, down, up):
    c = ClientCost(client=client, tier=0, steps=1)
    c.flops_total, c.down_bytes, c.up_bytes = flops, down, up
    return c


def test_round_lasts_as_long_as_its_slowest_client():
    clock = SimClock(["a", "b"], CAT)  # both 1 TFLOP/s, down 8 Mbit/s, up 4 Mbit/s
    secs, dropped = clock.round([_cost(0, 1e12, 1_000_000, 500_000), _cost(1, 3e12, 0, 0)])
    assert secs == max(1.0 + 1_000_000 * 8 / 8e6 + 500_000 * 8 / 4e6, 3.0) and dropped == []


def test_deadline_drops_late_clients():
    clock = SimClock(["a", "b", "c"], CAT, deadline=2.5)
    secs, dropped = clock.round([_cost(0, 1e12, 0, 0), _cost(1, 3e12, 0, 0), _cost(2, 2e12, 0, 0)])
    assert (secs, dropped) == (2.5, [1])


@pytest.mark.parametrize("devices, words", [("phone:1e999999999,laptop:1", "shares must be numbers"),
                                            ("phone:6,laptop", "give shares for every class"),
                                            ("phone:-1,laptop:1", "shares must be >= 0"),
                                            ("phone:2,phone:1", "named twice")])
def test_bad_devices_are_refused_before_the_records_folder_is_made(tmp_path, devices, words, capsys):
    """--devices is parsed whole when the run's configs are validated, so a bad share is one
    line and exit 2 with nothing written (the records folder was created first before)."""
    from fedbench.runners.cli.cli import main

    out = tmp_path / "r"
    assert main(["run", "--method", "fedavg", "--task", "tiny_text", "--devices", devices, "--out", str(out)]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()
