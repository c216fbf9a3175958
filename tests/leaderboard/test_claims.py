"""The claims report: flatness rule, claim files, paired measure, verdict rule, pre-fix marks,
the CLI, and the committed leaderboard/claims.md regenerating from the committed records."""

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from fedbench.errors import UserError
from fedbench.leaderboard.claims import Claim, Explanation, Fix, load_claims, measure, paper_names, seeds_needed
from fedbench.leaderboard.claims_report import (INCONCLUSIVE, NOT_AT_SIZE, NOT_RUN, NOT_TESTABLE, REGENERATE,
                                                REPRODUCED, REVERSED, build_report, verdict)
from fedbench.leaderboard.flatness import flatness
from fedbench.leaderboard.stats import t_quantile_975
from fedbench.records import load_records
from fedbench.runners.cli.cli import main

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"


# ------------------------------------------------------------------ flatness
def test_flat_when_the_last_fifth_gains_under_one_point():
    curve = [(r, 10.0 * r) for r in range(1, 8)] + [(8, 80.0), (9, 80.5), (10, 80.9)]
    f = flatness(curve)
    assert (f.start, f.end, f.flat) == (8, 10, True)
    assert f.gain == pytest.approx(80.9 - 80.0)


def test_not_flat_at_exactly_one_point():
    f = flatness([(8, 50.0), (9, 50.5), (10, 51.0)])
    assert f.gain == 1.0 and f.flat is False


def test_the_last_fifth_starts_at_r_minus_ceil_r_over_5():
    # R = 7: the last fifth starts at 7 - ceil(7 / 5) = 5, so the gain is 5.5 - 0, not 5.5 - 5
    f = flatness([(5, 0.0), (6, 5.0), (7, 5.5)])
    assert (f.start, f.gain, f.flat) == (5, 5.5, False)


def test_unevaluated_start_round_cannot_be_judged():
    f = flatness([(5, 10.0), (10, 10.2)])  # 8 not evaluated
    assert (f.start, f.gain, f.flat) == (8, None, None)
    assert flatness([]) is None


def test_flatness_judges_the_size_of_the_change():
    """|change| < 1 is flat; a curve that lost 1 point or more is falling, not flat."""
    falling = flatness([(8, 60.0), (9, 50.0), (10, 40.0)])
    assert (falling.state, falling.flat, falling.gain) == ("falling", False, 40.0 - 60.0)
    assert flatness([(8, 60.0), (9, 59.5), (10, 59.1)]).state == "flat"  # -0.9: flat
    assert flatness([(8, 60.0), (10, 59.0)]).state == "falling"  # exactly -1: falling
    assert flatness([(8, 60.0), (10, 61.5)]).state == "rising"


# ------------------------------------------------------------------ paired measure
def test_measure_pairs_shared_seeds():
    m = measure({0: 3.0, 1: 5.0, 2: 7.0, 9: 100.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert m.seeds == (0, 1, 2)
    assert m.diff == pytest.approx((2 + 3 + 4) / 3)
    assert m.sd == pytest.approx(1.0)
    assert m.half == pytest.approx(t_quantile_975(2) * 1.0 / math.sqrt(3))
    assert (m.mean_a, m.mean_b) == (pytest.approx(5.0), pytest.approx(2.0))
    assert measure({0: 1.0}, {0: 2.0}) is None


def test_seeds_needed():
    # sd 1, diff 1.5: n = 4 gives t(3) / 2 = 1.59 > 1.5, n = 5 gives t(4) / sqrt(5) = 1.24 < 1.5
    assert seeds_needed(1.5, 1.0) == 5
    assert seeds_needed(0.0, 1.0, most=50) is None


# ------------------------------------------------------------------ verdict rule
def _claim(sign=1, not_testable=None):
    return Claim("p", "T", "task", "a", "b", "1:1:1", (), "g", "iid", "IID", 2.0 if sign > 0 else 1.0,
                 1.0 if sign > 0 else 2.0, sign, not_testable, None, "not legible")


def test_verdict_rule():
    up = measure({0: 3.0, 1: 4.0, 2: 5.1}, {0: 1.0, 1: 2.0, 2: 3.0})  # A - B 2.03 ± 0.14
    inside = Claim("p", "T", "task", "a", "b", "1:1:1", (), "g", "iid", "IID", 3.0, 1.0, 1, None, None, "")
    assert verdict(inside, up, 0.01)[0] == REPRODUCED
    assert verdict(_claim(-1), up, 0.01)[0] == REVERSED
    assert verdict(inside, up, 0.2)[0] == INCONCLUSIVE  # raw CI excludes 0, Holm does not
    assert "before Holm" in verdict(inside, up, 0.2)[1]
    noisy = measure({0: 3.0, 1: 1.0, 2: 5.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    v, why = verdict(_claim(+1), noisy, 0.9)
    assert v == INCONCLUSIVE and f"below {abs(noisy.diff):.2f}" in why
    assert "outside" not in why  # the paper's +1.00 lies inside the noisy CI
    # diffs 0, 0, 0.1: mean 0.033, half-width t(0.975, 2) x 0.0577 / sqrt(3) = 4.303 x 0.0333 = 0.143,
    # so the paper's +1.00 lies outside [-0.11, +0.18]
    level = measure({0: 1.0, 1: 2.0, 2: 3.1}, {0: 1.0, 1: 2.0, 2: 3.0})
    v, why = verdict(_claim(+1), level, 0.9)
    assert v == NOT_AT_SIZE and "the paper's A - B (+1.00) lies outside the 95 % CI [-0.11, +0.18]" in why
    assert "smaller than the paper's; the sign is not settled" in why
    assert verdict(_claim(+1, "no backbone"), up, None) == (NOT_TESTABLE, "no backbone")
    assert verdict(_claim(+1), None, None)[0] == NOT_RUN


def test_not_reproduced_at_the_papers_size_whatever_the_sign_test_says():
    """diffs 2, 2, 2.1 (mean 2.03, CI +-0.14): the sign is settled, but a paper's +1.00 lies below
    the CI (a larger gap measured) and a paper's +2.00 inside it; reversed keeps precedence."""
    up = measure({0: 3.0, 1: 4.0, 2: 5.1}, {0: 1.0, 1: 2.0, 2: 3.0})
    v, why = verdict(_claim(+1), up, 0.01)  # paper: 2.0 vs 1.0
    assert v == NOT_AT_SIZE and "larger than the paper's; the sign is the paper's (Holm p 0.01)" in why
    inside = Claim("p", "T", "task", "a", "b", "1:1:1", (), "g", "iid", "IID", 3.0, 1.0, 1, None, None, "")
    assert verdict(inside, up, 0.01) == (REPRODUCED, "Holm p 0.01 < 0.05")
    unprinted = Claim("p", "T", "task", "a", "b", "1:1:1", (), "g", "iid", "IID", None, None, 1, None, None, "")
    assert verdict(unprinted, up, 0.01)[0] == REPRODUCED  # no paper size to miss
    assert verdict(_claim(-1), up, 0.01)[0] == REVERSED


# ------------------------------------------------------------------ claim files and fixes
def _write(tmp_path, text):
    (tmp_path / "paper.yaml").write_text(text)
    return tmp_path


def test_claims_from_a_table_block(tmp_path):
    d = _write(tmp_path, """
paper: paper
title: Paper
blocks:
  - table: T1
    task: ledgar
    method: a
    columns: {iid: IID, 20/1.0: N}
    groups:
      - roc: "6:3:1"
        where: {clients: 10}
        figures: {a: [5.0, 1.0], b: [4.0, 2.0]}
""")
    title, claims = load_claims(d, "paper")
    assert title == "Paper" and paper_names(d) == ["paper"]
    assert [(c.a, c.b, c.setting, c.column, c.sign, c.paper_diff) for c in claims] == [
        ("a", "b", "iid", "IID", 1, 5.0 - 4.0), ("a", "b", "20/1.0", "N", -1, 1.0 - 2.0)]
    assert claims[0].where == (("clients", "10"),) and claims[0].roc == "6:3:1"


@pytest.mark.parametrize("figures,claim", [("{a: [1.0], b: [1.0]}", ""), ("{a: [1.0], b: [null]}", ""),
                                           ("{a: [1.0], b: [2.0, 3.0]}", ""), ("{a: [1.0], b: [2.0]}", "claim: '>='")])
def test_bad_claim_blocks_are_one_line_errors(tmp_path, figures, claim):
    d = _write(tmp_path, f"""
paper: paper
blocks:
  - table: T1
    task: t
    method: a
    {claim}
    columns: {{iid: IID}}
    groups: [{{roc: "-", figures: {figures}}}]
""")
    with pytest.raises(UserError):
        load_claims(d, "paper")


def test_null_figure_takes_the_declared_direction(tmp_path):
    d = _write(tmp_path, """
paper: paper
blocks:
  - {table: T, task: t, method: a, claim: "<", columns: {iid: IID}, groups: [{roc: "-", figures: {a: [1.0], b: [null]}}]}
""")
    (c,) = load_claims(d, "paper")[1]
    assert c.sign == -1 and c.paper_diff is None


EXPLAINED = """
paper: paper
title: Paper
blocks:
  - table: T1
    task: ledgar
    method: a
    columns: {iid: IID, 20/1.0: N}
    groups:
      - roc: "6:3:1"
        figures: {a: [5.0, 6.0], b: [1.0, 0.5], c: [4.0, 4.5]}
        explained_by:
          b: {kind: code reading, text: "their  server
            averages the factors", measured_by: benchmarks/x.yaml}
          c: {kind: measurement, text: "the head", measured_by: "records abc123",
              ablations: [{factor: a frozen head, settings: [iid], arm: {rounds: 9}}]}
"""


def test_explained_by_is_read_and_printed_under_its_claims(tmp_path):
    d = _write(tmp_path, EXPLAINED)
    _, claims = load_claims(d, "paper")
    by = {(c.b, c.setting): c.explained_by for c in claims}
    assert by[("b", "iid")] == by[("b", "20/1.0")] == Explanation("code reading", "their server averages the factors",
                                                                   "benchmarks/x.yaml")
    assert by[("c", "iid")].kind == "measurement"
    text = build_report(d, [], ["paper"])
    under = text.split("### T1")[1]
    assert ("- a vs b, 6:3:1 (iid, 20/1.0): code reading, not yet a measurement: their server averages the factors "
            "(to measure: benchmarks/x.yaml)") in under
    assert ("- a vs c, 6:3:1 (iid, 20/1.0): measured: the head (measured by records abc123)\n"
            "    - a frozen head (rounds=9), iid: not measured yet (A and B share 0 of the arm's seeds, 2 needed)") in under
    assert under.index("Not run here:") < under.index("Explained by:")  # under the claims' table
    assert "**code reading**" in text.split("### T1")[0]  # the rule is stated once the report has one
    assert "Explained by" not in build_report(_write(tmp_path, EXPLAINED.split("        explained_by:")[0]), [],
                                              ["paper"])


@pytest.mark.parametrize("entry", ["{d: {kind: measurement, text: t, measured_by: x}}",  # d has no figures
                                   "{b: {kind: guess, text: t}}", "{b: {kind: measurement, text: t}}",
                                   "{b: {kind: code reading, text: ''}}", "{b: {text: t}}"])
def test_bad_explained_by_is_a_one_line_error(tmp_path, entry):
    d = _write(tmp_path, EXPLAINED.split("        explained_by:")[0] + f"        explained_by: {entry}\n")
    with pytest.raises(UserError):
        load_claims(d, "paper")


def test_fix_marks_records_created_before_it():
    fix = Fix("abc", "2026-11-24T23:20:10+00:00", "w", ("fedproto",), ("k/-",))

    def rec(method, setting, created):
        return {"run": {"method": method, "run_config": {"setting": setting}, "created_at": created}}

    assert fix.affects(rec("fedproto", "iid", "2026-11-23T10:00:00+00:00"))
    assert not fix.affects(rec("fedproto", "iid", "2026-11-25T10:00:00+00:00"))
    assert fix.affects(rec("fedavg", "2/-", "2026-11-23T10:00:00+00:00"))
    assert not fix.affects(rec("fedavg", "20/1.0", "2026-11-23T10:00:00+00:00"))


# ------------------------------------------------------------------ CLI and the committed report
@pytest.mark.parametrize("argv", [["claims"], ["claims", "nope", "--claims", str(ROOT / "claims")],
                                  ["claims", "fedra", "--all"]])
def test_cli_bad_input_is_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbench: error: ") and err.count("\n") == 1


@pytest.mark.skipif(not (ROOT / "records").is_dir(), reason="no committed records (not a source checkout)")
def test_committed_claims_regenerate_from_committed_records():
    text = build_report(ROOT / "claims", load_records(ROOT / "records"), paper_names(ROOT / "claims"), figures=True)
    assert REGENERATE in text
    assert (ROOT / "claims.md").read_text() == text, f"leaderboard/claims.md is stale or edited; run `{REGENERATE}`"


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT.parent / ".git").exists(), reason="no git checkout")
def test_pre_fix_marks_agree_with_git_ancestry():
    """A record's created_at is before a fix exactly when its commit does not contain the fix
    (for the records the fix concerns and whose commit this clone has)."""
    from fedbench.leaderboard.claims import load_fixes

    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT.parent), *args], capture_output=True, text=True)

    checked = 0
    for fix in load_fixes(ROOT / "claims"):
        concerned = [r for r in load_records(ROOT / "records") if fix.concerns(r)]
        for commit in sorted({r["run"]["git_commit"] for r in concerned}):
            if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
                continue
            has_fix = git("merge-base", "--is-ancestor", fix.commit, commit).returncode == 0
            for r in (r for r in concerned if r["run"]["git_commit"] == commit):
                assert fix.affects(r) == (not has_fix) or r["run"].get("git_dirty"), r["run"]["run_id"]
                checked += 1
    assert checked


def _budget_rec(method, setting, seed, rounds):
    from .test_generate import make

    rec = make(method, setting, seed, 0.5)
    rec["run"]["run_id"] = f"{method}-{setting}-{seed}-{rounds}"
    rec["run"]["run_config"]["rounds"] = rounds
    return rec


def test_where_picks_the_budget_even_when_the_table_drops_it():
    """A claim's ``where`` reads the records' whole variant: ``rounds`` picks the evidence budget
    where two budgets are rows of their own, and still matches where the table drops it (every run
    of the table shares it); a setting run only at another budget has no row."""
    from fedbench.leaderboard.claims import find_row
    from fedbench.leaderboard.groups import build_section

    where = (("rounds", "50"),)
    two = [_budget_rec("fed_hello", "iid", s, r) for s in (0, 1) for r in (10, 50)]
    sec = build_section("t", "top1", two)
    assert dict(find_row(sec, "fed_hello", "6:3:1", where, "iid").variant) == {"rounds": "50"}
    with pytest.raises(UserError, match="2 rows of fed_hello"):
        find_row(sec, "fed_hello", "6:3:1", (), "iid")
    one = [_budget_rec("fed_hello", "iid", s, 50) for s in (0, 1)] + [_budget_rec("fed_hello", "20/1.0", 0, 10)]
    sec = build_section("t", "top1", one)
    assert sec.rows[0].variant == ()  # rounds is fixed per setting: not part of the row
    assert find_row(sec, "fed_hello", "6:3:1", where, "iid") == sec.rows[0]
    assert find_row(sec, "fed_hello", "6:3:1", where, "20/1.0") is None


# ------------------------------------------------------------------ claims not run: command and cost
def _timed_rec(method, setting, seed, rounds, spr, tpr, **variant):
    """A record of ``task`` at 1:1:1 with ``rounds`` completed at ``spr`` s and ``tpr`` TFLOPs per round."""
    r = _budget_rec(method, setting, seed, rounds)
    r["run"].update(task="task", resource_label="1:1:1", rounds_completed=rounds)
    r["run"]["run_config"].update(variant)
    r["cost"].update(seconds_total=rounds * spr, tflops_total=rounds * tpr)
    return r


def test_cost_counts_only_the_missing_runs_and_fills_where_into_the_command():
    """A has seeds 0-2 in the claim's cell (iid, 1:1:1, rounds 4) at 30 s and 0.5 TFLOPs per
    round, B none there (only in 20/1.0) at 60 s and 1.0 TFLOPs per round: each method's missing
    runs are timed from its own records: A (5 - 3) x 4 rounds x 30 s + B (5 - 0) x 4 rounds x 60 s
    = 240 + 1200 s = 24 CPU-min; 2 x 4 x 0.5 + 5 x 4 x 1.0 = 24 TFLOPs."""
    from fedbench.leaderboard.claims_report import evaluate

    recs = ([_timed_rec("a", "iid", s, 4, 30.0, 0.5) for s in (0, 1, 2)]
            + [_timed_rec("b", "20/1.0", s, 4, 60.0, 1.0) for s in (0, 1)])
    c = Claim("p", "T", "task", "a", "b", "1:1:1", (("rounds", "4"),), "g", "iid", "IID", 2.0, 1.0, 1, None,
              "sweep P --only method={a},{b} --only setting={setting} --only roc={roc} ({rounds} rounds)",
              "not legible")
    (o,) = evaluate([c], recs)
    assert o.verdict == NOT_RUN and o.measured is None and o.elsewhere == ""
    assert o.cost.startswith("sweep P --only method=a,b --only setting=iid --only roc=1:1:1 (4 rounds); est. 24 CPU-min")
    assert "a 2 runs x 4 rounds x 30.0 s/round (a's 3 records, 0.50 TFLOPs/round)" in o.cost
    assert "b 5 runs x 4 rounds x 60.0 s/round (b's 2 records, 1.00 TFLOPs/round)" in o.cost
    assert "(2 methods x 5 seeds, a has 3 of them); 24 TFLOPs of training" in o.cost


def test_cost_of_a_method_never_run_is_timed_from_the_other_and_says_so():
    """B has no record on the task: its 5 runs are timed from A's 3 records (30 s/round), and the
    text names that source instead of passing it off as B's: (2 + 5) x 4 x 30 s = 14 CPU-min."""
    from fedbench.leaderboard.claims_report import evaluate

    recs = [_timed_rec("a", "iid", s, 4, 30.0, 0.5) for s in (0, 1, 2)]
    c = Claim("p", "T", "task", "a", "b", "1:1:1", (("rounds", "4"),), "g", "iid", "IID", 2.0, 1.0, 1, None,
              "sweep P", "")
    (o,) = evaluate([c], recs)
    assert "est. 14 CPU-min" in o.cost
    assert "b 5 runs x 4 rounds x 30.0 s/round (no record of b: a's 3 records" in o.cost
    assert "records of a, b" not in o.cost



def test_cost_of_two_methods_never_run_is_timed_from_the_tasks_records_and_says_so():
    """Neither A nor B has a record: both are timed from C's 2 records (30 s/round), named as such:
    2 x 5 runs x 4 rounds x 30 s = 20 CPU-min."""
    from fedbench.leaderboard.claims_report import evaluate

    recs = [_timed_rec("c", "iid", s, 4, 30.0, 0.5) for s in (0, 1)]
    c = Claim("p", "T", "task", "a", "b", "1:1:1", (("rounds", "4"),), "g", "iid", "IID", 2.0, 1.0, 1, None,
              "sweep P", "")
    (o,) = evaluate([c], recs)
    assert "est. 20 CPU-min = a 5 runs x 4 rounds x 30.0 s/round (no record of a: all 2 records of task" in o.cost

def test_cost_times_from_records_at_the_claims_fields_before_other_budgets():
    """A claim at (clients 50, rounds 8): A's records at clients 50 (4 rounds, 40 s/round) time it,
    not its faster clients-10 records (10 s/round), since s/round does not depend on rounds:
    5 runs x 8 rounds x 40 s = 1600 s = 27 CPU-min (26.7); B has its 5 seeds there already."""
    from fedbench.leaderboard.claims_report import evaluate

    recs = ([_timed_rec("a", "iid", s, 4, 10.0, 0.1, clients=10) for s in (0, 1)]
            + [_timed_rec("a", "iid", s, 4, 40.0, 0.1, clients=50) for s in (0, 1)]
            + [_timed_rec("b", "iid", s, 8, 5.0, 0.1, clients=50) for s in range(5)])
    c = Claim("p", "T", "task", "a", "b", "1:1:1", (("clients", "50"), ("rounds", "8")), "g", "iid", "IID",
              2.0, 1.0, 1, None, "sweep P", "")
    (o,) = evaluate([c], recs)
    assert "est. 27 CPU-min = a 5 runs x 8 rounds x 40.0 s/round (a's 2 records at other round counts" in o.cost
    assert "b has 5 of them" in o.cost and "b 0 runs" not in o.cost



def test_cost_of_a_model_is_timed_only_from_records_of_that_model():
    """A claim on model "big": A's only records are on "small" (10 s/round), B's on "big" (90 s/round):
    A's 5 runs are timed from B's big records, not its own small ones: (5 + 3) x 4 x 90 s = 48 CPU-min.
    With no record of "big" at all, A's small records time both (10 x 4 x 10 s = 7 CPU-min), and the
    text says that none of them has the claim's model."""
    from fedbench.leaderboard.claims_report import evaluate

    def on(model, r):
        r["run"]["task_config"] = {**(r["run"].get("task_config") or {}), "model": model}
        return r

    small = [on("small", _timed_rec("a", "iid", s, 4, 10.0, 0.1)) for s in (0, 1)]
    big = [on("big", _timed_rec("b", "iid", s, 4, 90.0, 0.1)) for s in (0, 1)]
    c = Claim("p", "T", "task", "a", "b", "1:1:1", (("rounds", "4"), ("task.model", '"big"')), "g", "iid", "IID",
              2.0, 1.0, 1, None, "sweep P", "")
    (o,) = evaluate([c], small + big)
    assert "est. 48 CPU-min = a 5 runs x 4 rounds x 90.0 s/round (no record of a: b's 2 records" in o.cost
    (o,) = evaluate([c], small)
    assert o.cost.startswith("sweep P; est. 7 CPU-min = a 5 runs x 4 rounds x 10.0 s/round (a's 2 records at "
                             "other budgets, none with task.model=big, ")
    assert "b 5 runs x 4 rounds x 10.0 s/round (no record of b: a's 2 records at other budgets, none with " in o.cost


def spec_has(spec, where: tuple) -> bool:
    """A sweep run's spec has every (field, canonical JSON value) of a claim's ``where`` (a bare
    name is a run field), compared as ``fedbench sweep --only`` compares (lists too); a method
    field only where the run's method has it."""
    from fedbench.runners.core.sweep import _field_value

    for k, v in where:
        key = k if "." in k else f"run.{k}"
        got, want = _field_value(spec, key), json.loads(v)
        if not (got == (want if isinstance(want, str) else json.dumps(want))
                or (got is None and key.startswith("method."))):
            return False
    return True


def test_a_preset_here_loads_without_shared_data_with_the_presets_run_ids(tmp_path, monkeypatch):
    """Run from a folder where ``../shared`` does not resolve, the evidence preset is refused (its
    data_dir is missing) and :func:`smoke.preset_here`'s copy loads, with the run ids the
    preset's committed records carry."""
    from smoke import preset_here

    from fedbench.runners.core.sweep import load_sweep

    preset = ROOT.parent / "benchmarks" / "fed_hello_claims_cpu.yaml"
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    with pytest.raises(UserError, match="no such directory"):
        load_sweep(preset)
    runs = load_sweep(preset_here(preset, tmp_path))
    committed = {r["run"]["run_id"] for r in load_records(ROOT / "records" / "ledgar")}
    seed0 = [r for r in runs if r.spec.run.seed == 0 and r.spec.method == "fed_hello"]
    assert len(seed0) >= 6 and all(r.spec.run_id in committed for r in seed0)


@pytest.mark.parametrize("paper", ["fed_hello", "fedlora"])
def test_each_claims_command_selects_its_cell_from_its_preset(paper, tmp_path):
    """The command the report prints for a claim not run yet is a real one: its ``--only``
    filters select from the named preset exactly A and B at the claim's setting, resource group
    and ``where`` fields, 5 seeds each (with or without ``../shared``: :func:`smoke.preset_here`)."""
    import shlex

    from smoke import preset_here

    from fedbench.leaderboard.claims import load_claims
    from fedbench.runners.core.sweep import load_sweep, select

    repo = ROOT.parent
    presets: dict = {}  # path -> its runs (built once)
    checked = 0
    for c in load_claims(ROOT / "claims", paper)[1]:
        if not c.command:
            continue
        argv = shlex.split(c.run_command())
        assert argv[:2] == ["fedbench", "sweep"], c.command
        only = [argv[i + 1] for i, a in enumerate(argv) if a == "--only"]
        if argv[2] not in presets:
            presets[argv[2]] = load_sweep(preset_here(repo / argv[2], tmp_path))
        runs = select(presets[argv[2]], only)
        assert {r.spec.method for r in runs} == {c.a, c.b}
        assert {r.spec.run.setting for r in runs} == {c.setting}
        assert {r.spec.run.roc or "-" for r in runs} == {c.roc}
        assert all(spec_has(r.spec, c.where) for r in runs), c
        assert len(runs) == 2 * 5
        checked += 1
    assert checked
