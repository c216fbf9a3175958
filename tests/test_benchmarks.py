"""The measurement scripts under benchmarks/ still run against the current API (their
figures are printed, not asserted, except the savings that define the method)."""

import importlib.util
import json
from pathlib import Path

from fedbench.runners.core.experiment import Experiment
from smoke import SMALL_TASK_CONFIGS

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_savings_client_step_measures_fedra_sub_models(tmp_path):
    savings = _load("savings")
    exp = Experiment("fedra", "tiny_vision", dict(max_steps=1, out=str(tmp_path)),
                     task_config=SMALL_TASK_CONFIGS["tiny_vision"])
    exp.setup()
    full = savings.client_step(exp, range(12), blocks=range(12))
    half = savings.client_step(exp, range(6), blocks=range(6))
    flops = lambda c: c.flops_forward_step + c.flops_backward_step  # noqa: E731
    assert 0.4 < flops(half) / flops(full) < 0.6  # 6 of 12 blocks: about half the step


def test_throughput_prints_every_section_and_skips_packed_when_unregistered(capsys):
    throughput = _load("throughput")
    throughput.main(["--repeats", "1", "--rounds", "2", "--clients", "4", "--per-round", "2", "--max-steps", "1",
                     "--tiny-text", json.dumps(SMALL_TASK_CONFIGS["tiny_text"]),
                     "--tiny-vision", json.dumps(SMALL_TASK_CONFIGS["tiny_vision"]),
                     "--executor", "no_such_executor"])
    out = capsys.readouterr().out
    for section in ("(1) meter overhead, fed_hello_rgd", "(2) evaluation share", "(3) bf16 / fp32 s/step",
                    "(4) packed vs local: skipped, no executor named 'no_such_executor'"):
        assert section in out, section


def test_packed_vs_local_compares_a_registered_executor(tmp_path, capsys):
    throughput = _load("throughput")
    got = throughput.packed_vs_local("local", [("tiny_text", "tiny_text", SMALL_TASK_CONFIGS["tiny_text"])],
                                     ks=(2,), out=str(tmp_path), rounds=1)
    assert set(got) == {("tiny_text", 2)} and got[("tiny_text", 2)]["local"] > 0
    assert "(4) tiny_text, K=2: local" in capsys.readouterr().out


def test_plora_budget_runs_every_arm_and_counts_the_share_each_trains(capsys):
    plora = _load("plora_budget")
    task = {**plora.TASK, "n_train": 80, "n_test": 40}
    got = plora.main(["--seeds", "0", "--rounds", "2", "--task", json.dumps(task)])
    share = {name: rows[0]["share"] for name, rows in got.items()}
    # RoC 6:3:1: ranks 1/4/16 of 16 -> 0.6/16 + 0.3*4/16 + 0.1; layers 3/5/6 of 6 -> 0.6/2 + 0.3*5/6 + 0.1
    assert abs(share["fed_plora rank"] - (0.6 / 16 + 0.3 * 4 / 16 + 0.1)) < 1e-9
    assert abs(share["fed_hello"] - (0.6 * 3 / 6 + 0.3 * 5 / 6 + 0.1)) < 1e-9
    assert share["fed_plora layers"] == share["fed_hello"]
    assert abs(share["fed_plora matched"] - (0.6 * 8 / 16 + 0.3 * 13 / 16 + 0.1)) < 1e-9
    out = capsys.readouterr().out
    assert all(name in out for name in plora.ARMS) and "x fed_plora rank's" in out
