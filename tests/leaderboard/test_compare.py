"""``fedbench compare``: paired tests of methods against baselines, Holm-adjusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedbench.errors import UserError
from fedbench.leaderboard.compare import compare, holm, render_comparisons, select_records
from fedbench.runners.cli.cli import main

from .test_generate import make

RECORDS = Path(__file__).parent / "fixtures" / "records"


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 (m = 3): 3 * 0.01 = 0.03; 2 * 0.03 = 0.06; 1 * 0.04 = 0.04 -> kept at 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == []


def _cell(method, finals, *, label="6:3:1", metric="top1", setting="iid"):
    return [make(method, setting, seed, f, label=label, metric=metric) for seed, f in enumerate(finals)]


def test_compare_by_hand():
    pytest.importorskip("scipy")
    recs = (_cell("fed_hello", [0.60, 0.70, 0.80]) + _cell("fedra", [0.50, 0.55, 0.62])
            + _cell("fedra", [0.10, 0.10, 0.10], label="1:1:1"))  # another RoC: never paired with 6:3:1
    (c,) = compare("t", recs, ["fed_hello"], ["fedra"])
    # d = 10, 15, 18 points: mean 14.333, s = sqrt((4.333^2 + 0.667^2 + 3.667^2) / 2) = 4.0415,
    # t = 14.333 / (4.0415 / sqrt 3) = 6.143, df 2 -> p = 0.0255; one comparison: p_holm = p
    assert (c.label, c.setting, c.row_a, c.row_b, c.n) == ("6:3:1", "iid", "fed_hello", "fedra", 3)
    assert (c.mean_a, c.mean_b, c.diff) == pytest.approx((70.0, 55.6667, 14.3333), abs=1e-3)
    assert c.t == pytest.approx(6.143, abs=1e-3) and c.p == pytest.approx(0.0255, abs=1e-4)
    assert c.p_holm == c.p and c.significant and c.ahead and not c.behind
    text = render_comparisons("t", [c], ["fed_hello"], ["fedra"])
    assert "| top1 | 6:3:1 | iid | fed_hello | fedra | 3 | 70.00 | 55.67 | +14.33 | 6.14 | 0.025 | 0.025 * |" in text
    assert "A significantly ahead in 1, behind in 0 (Holm); 1 with raw p < 0.05." in text


def test_holm_over_the_whole_report():
    pytest.importorskip("scipy")
    # the by-hand cell (raw p 0.0255) in two settings: Holm doubles it to 0.051, not significant
    recs = []
    for setting in ("iid", "20/1.0"):
        recs += _cell("a", [0.60, 0.70, 0.80], setting=setting) + _cell("b", [0.50, 0.55, 0.62], setting=setting)
    found = compare("t", recs, ["a"], ["b"])
    assert [c.setting for c in found] == ["iid", "20/1.0"]
    for c in found:
        assert c.p == pytest.approx(0.0255, abs=1e-4) and c.p_holm == pytest.approx(2 * c.p)
        assert not (c.significant or c.ahead or c.behind)
    assert "A significantly ahead in 0, behind in 0 (Holm); 2 with raw p < 0.05." in render_comparisons(
        "t", found, ["a"], ["b"])


def test_lower_is_better():
    pytest.importorskip("scipy")
    # loss (not a percent metric): A lower by 10, 11, 12 -> mean -11, s 1, t = -11 * sqrt 3 = -19.05, p = 0.0027
    recs = _cell("a", [1.0, 2.0, 3.0], metric="loss") + _cell("b", [11.0, 13.0, 15.0], metric="loss")
    (c,) = compare("t", recs, ["a"], ["b"])
    assert c.diff == pytest.approx(-11.0) and c.t == pytest.approx(-11 * 3 ** 0.5) and c.p < 0.003
    assert c.ahead and not c.behind
    (c,) = compare("t", recs, ["b"], ["a"])
    assert c.behind and not c.ahead


def test_no_shared_seeds_no_test():
    recs = _cell("a", [0.5, 0.6]) + [make("b", "iid", 5, 0.4)]
    assert compare("t", recs, ["a"], ["b"]) == []
    assert "No cell of both methods" in render_comparisons("t", [], ["a"], ["b"])


def test_cli_compare(capsys):
    assert main(["compare", "fed_hello", "--against", "fedra", "--task", "tiny_text", "--records", str(RECORDS)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# fed_hello against fedra on tiny_text")
    assert main(["compare", "fed_hello", "--against", "nope", "--task", "tiny_text", "--records", str(RECORDS)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"fedbench: error: no records of method(s) nope for task 'tiny_text' under {RECORDS}")


def test_runs_of_another_budget_are_not_paired():
    """rounds is a cohort field: a 50-round A is paired with B's 50-round runs only, never with
    B's 10-round runs (the budget would be the difference)."""
    def at(method, rounds, finals):
        recs = _cell(method, finals)
        for r in recs:
            r["run"]["run_config"]["rounds"] = rounds
            r["run"]["run_id"] += f"-{rounds}"
        return recs

    recs = at("fed_hello", 50, [0.6, 0.7, 0.8]) + at("fed_hello", 10, [0.5, 0.6, 0.7]) + at("exclusive", 10, [0.4, 0.5, 0.6])
    out = compare("t", recs, ["fed_hello"], ["exclusive"])
    assert [(c.row_a, c.row_b, c.n) for c in out] == [("fed_hello (rounds=10)", "exclusive", 3)]
    assert out[0].diff == pytest.approx(10.0)  # (0.5 - 0.4) x 100, every seed


def test_only_narrows_the_report_and_its_holm_family():
    pytest.importorskip("scipy")
    # the two-setting report of test_holm_over_the_whole_report, narrowed to iid: one comparison, p_holm = p
    recs = []
    for setting in ("iid", "20/1.0"):
        recs += _cell("a", [0.60, 0.70, 0.80], setting=setting) + _cell("b", [0.50, 0.55, 0.62], setting=setting)
    (c,) = compare("t", select_records(recs, ["setting=iid"]), ["a"], ["b"])
    assert c.setting == "iid" and c.p_holm == c.p == pytest.approx(0.0255, abs=1e-4) and c.significant
    assert len(select_records(recs, ["setting=iid,20/1.0", "seed=0,2"])) == 8  # 2 settings x 2 methods x 2 seeds


def test_only_roc_is_the_resource_label():
    recs = _cell("a", [0.6, 0.7]) + _cell("a", [0.1, 0.2], label="1:1:1")
    assert {r["run"]["resource_label"] for r in select_records(recs, ["roc=1:1:1"])} == {"1:1:1"}
    with pytest.raises(UserError, match=r"--only 'roc=2:1' \(with the filters before it\) matches no record"):
        select_records(recs, ["roc=2:1"])


def test_only_a_method_field_leaves_methods_without_it_in():
    # fed_hello has train_head; exclusive has none, so --only method.train_head=true keeps it
    frozen = _cell("fed_hello", [0.4, 0.5])
    for r in frozen:
        r["run"]["method_config"]["train_head"] = False
    recs = _cell("fed_hello", [0.6, 0.7]) + frozen + _cell("exclusive", [0.3, 0.4])
    kept = select_records(recs, ["method.train_head=true"])
    assert [(r["run"]["method"], r["results"]["final"]) for r in kept] == [
        ("fed_hello", 0.6), ("fed_hello", 0.7), ("exclusive", 0.3), ("exclusive", 0.4)]
    assert [r["results"]["final"] for r in select_records(recs, ["run.rounds=1", "method=fed_hello"])] == [
        0.6, 0.7, 0.4, 0.5]  # a run field, as JSON (rounds 1)


def test_only_refuses_what_does_not_tell_rows_apart():
    recs = _cell("a", [0.6, 0.7])
    with pytest.raises(UserError, match="run.device is not a field that tells leaderboard rows apart"):
        select_records(recs, ["run.device=cpu"])
    with pytest.raises(UserError, match="expected KEY=V1,V2 with KEY one of method, setting, seed, clients, roc"):
        select_records(recs, ["lr=0.1"])


def test_cli_compare_only(capsys):
    args = ["compare", "fed_hello", "--against", "fedra", "--task", "tiny_text", "--records", str(RECORDS)]
    assert main([*args, "--only", "setting=iid", "--only", "roc=6:3:1"]) == 0
    assert capsys.readouterr().out.startswith("# fed_hello against fedra on tiny_text")
    # the fixtures' fedra has seed 0 only: filtered to seed 1, nothing of it is left to compare
    assert main([*args, "--only", "seed=1"]) == 2
    assert "no records of method(s) fedra for task 'tiny_text'" in capsys.readouterr().err
    assert main([*args, "--only", "setting=nope"]) == 2
    assert "--only 'setting=nope' (with the filters before it) matches no record" in capsys.readouterr().err


def test_only_a_list_valued_field_in_brackets():
    # the tier-budget ablation's records differ from the claims' by run.tier_fractions, a list
    tight = _cell("fed_hello", [0.4, 0.5])
    for r in tight:
        r["run"]["run_config"]["tier_fractions"] = [0.16, 0.33, 1.0]
    recs = _cell("fed_hello", [0.6, 0.7]) + tight
    kept = select_records(recs, ["run.tier_fractions=[0.16,0.33,1.0]"])
    assert [r["results"]["final"] for r in kept] == [0.4, 0.5]
