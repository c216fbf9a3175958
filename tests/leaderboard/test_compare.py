"""``fedbench compare``: paired tests of methods against baselines, Holm-adjusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedbench.leaderboard.compare import compare, holm, render_comparisons
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
