"""Rows per config variant, seeds in one cell, and the significance dagger."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fedbench.leaderboard.generate import render_task
from fedbench.leaderboard.groups import raw_variant
from fedbench.leaderboard.sections import ok_sections


def _sibling(name):
    spec = importlib.util.spec_from_file_location(f"_lb_{name}", Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make, table_rows = _sibling("test_generate").make, _sibling("test_generate").table_rows


def with_config(rec, **run_config):
    """``rec`` with a full run config (``run_config`` overrides), runtime fields included as older
    records had them (they never split a row)."""
    rec["run"]["run_config"].update(clients=10, per_round=5, rounds=4, lr=0.001, max_steps=None, out="results",
                                    device="cpu", runner="local", workers=1, threads=1, eval_every=1,
                                    measure_flops=True, eval_initial=False, roc="6:3:1", capacities=None)
    rec["run"]["run_config"].update(run_config)
    return rec


def test_records_differing_only_in_lr_are_two_rows():
    recs = [with_config(make("fedavg", seed=s, final=0.5 + s / 100), lr=0.01) for s in (0, 1)]
    recs += [with_config(make("fedavg", seed=s, final=0.6), lr=0.1) for s in (0, 1)]
    text = render_task("t", recs)
    rows = table_rows(text)
    assert list(rows) == [("fedavg (lr=0.1)", "6:3:1"), ("fedavg (lr=0.01)", "6:3:1")]  # ranked by Avg
    assert rows[("fedavg (lr=0.01)", "6:3:1")]["iid"] == "50.50 ± 6.35 (2) † -9.50"
    assert "differ between rows: `lr`" in text


def test_records_differing_only_in_ignored_fields_or_seed_share_a_cell():
    recs = [with_config(make("fedavg", seed=0, final=0.5), out="a", device="cuda", workers=4),
            with_config(make("fedavg", seed=1, final=0.6), out="b", threads=8, eval_every=2)]
    recs[1]["run"]["task_config"]["data_dir"] = "/somewhere"
    rows = table_rows(render_task("t", recs))
    assert list(rows) == [("fedavg", "6:3:1")]
    assert rows[("fedavg", "6:3:1")]["iid"].endswith(" (2)**")


def test_rounds_split_rows_into_budgets_and_method_fields_split_rows():
    a, b, c = make("fedra", seed=0), make("fedra", seed=1), make("fedra", seed=2)
    c["run"]["run_config"]["rounds"] = 2
    assert raw_variant(a)["rounds"] == "1" and raw_variant(a)["method_version"] == "1"
    text = render_task("t", [a, b, c])
    # one table per budget, the budget in its heading, the rows named without it
    assert text.index("## Budget: rounds=1") < text.index("## Budget: rounds=2")
    assert list(table_rows(text.split("## Budget: rounds=2")[1])) == [("fedra", "6:3:1")]
    assert sorted(ok_sections("t", [a, b, c])[2][0].names.values()) == ["fedra (rounds=1)", "fedra (rounds=2)"]
    # method config differences split too, prefixed with method.
    a["run"]["method_config"] = {"lora_r": 4}
    b["run"]["method_config"] = {"lora_r": 8}
    assert list(table_rows(render_task("t", [a, b]))) == [("fedra (method.lora_r=4)", "6:3:1"),
                                                          ("fedra (method.lora_r=8)", "6:3:1")]


def test_a_method_version_splits_rows():
    a, b = make("fedra", seed=0), make("fedra", seed=1)
    b["run"]["method_version"] = 2
    assert sorted(ok_sections("t", [a, b])[2][0].names.values()) == ["fedra (method_version=1)",
                                                                     "fedra (method_version=2)"]


def test_field_fixed_by_the_setting_does_not_split_a_row():
    recs = []
    for m in ("fedavg", "fedra"):
        recs.append(with_config(make(m, setting="domain"), clients=6))
        recs.append(with_config(make(m, setting="iid"), clients=10))
    rows = table_rows(render_task("t", recs))
    assert list(rows) == [("fedavg", "6:3:1"), ("fedra", "6:3:1")]
    assert rows[("fedra", "6:3:1")]["Avg"] != "-"


def test_dagger_marks_a_row_significantly_behind_the_best():
    best = [make("fedavg", seed=s, final=f) for s, f in enumerate((0.80, 0.85, 0.90))]
    behind = [make("fedra", seed=s, final=f) for s, f in enumerate((0.78, 0.82, 0.875))]  # d = -2, -3, -2.5
    close = [make("hetlora", seed=s, final=f) for s, f in enumerate((0.78, 0.82, 0.89))]  # d = -2, -3, -1
    single = [make("flora", seed=0, final=0.10)]
    rows = table_rows(render_task("t", best + behind + close + single))
    assert rows[("fedavg", "6:3:1")]["iid"] == "**85.00 ± 12.42 (3)**"
    assert rows[("fedra", "6:3:1")]["iid"] == "82.50 ± 11.85 (3) † -2.50"
    assert "†" not in rows[("hetlora", "6:3:1")]["iid"]
    assert rows[("flora", "6:3:1")]["iid"] == "10.00"  # one seed: not tested


def test_lower_is_better_dagger_sign():
    best = [make("fedavg", seed=s, final=f, metric="loss") for s, f in enumerate((1.0, 1.1, 1.2))]
    worse = [make("fedra", seed=s, final=f + 0.5, metric="loss") for s, f in enumerate((1.0, 1.1, 1.2))]
    rows = table_rows(render_task("t", best + worse))
    assert rows[("fedra", "6:3:1")]["iid"].endswith("† +0.5")


def test_personalised_records_get_a_worst_client_table():
    recs = []
    for seed, (mean, worst) in enumerate([(0.8, 0.5), (0.82, 0.55)]):
        r = make("fedlora", setting="2/-", seed=seed, final=mean)
        r["results"]["local"] = {"mean": mean, "std": 0.1, "min": worst, "median": mean, "by_arch": {}}
        recs.append(r)
    recs.append(make("fedavg", setting="2/-", final=0.7))  # globally evaluated: not in that table
    text = render_task("t", recs)
    assert "Worst client" in text
    worst = text[text.index("Worst client"):]
    assert "fedlora" in worst and "fedavg" not in worst.split("\n\n")[1]
    assert f"{(0.5 + 0.55) / 2 * 100:.2f}" in worst


def test_rows_of_different_federations_are_ranked_apart():
    """N=10 and N=50 rows are different federations: a table each, each with its own best, no dagger across."""
    recs = []
    for n, finals in ((10, (0.9, 0.92, 0.91)), (50, (0.6, 0.62, 0.61))):
        for method, shift in (("fedlora", 0.0), ("fd", -0.05)):
            recs += [with_config(make(method, seed=s, final=f + shift), clients=n) for s, f in enumerate(finals)]
    text = render_task("t", recs)
    rows = table_rows(text.split("## Budget: clients=50")[1])
    assert list(rows) == [("fedlora", "6:3:1"), ("fd", "6:3:1")]  # ranked
    assert rows[("fedlora", "6:3:1")]["iid"].startswith("**")  # best of its federation
    assert "†" in rows[("fd", "6:3:1")]["iid"] and "-5.00" in rows[("fd", "6:3:1")]["iid"]
