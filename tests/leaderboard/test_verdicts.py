"""Each verdict of the claims report on hand-built records, the records at another budget
named for a claim not run, and a note shown only on the claims it is about."""

from fedbench.leaderboard.claims import Claim, load_claims
from fedbench.leaderboard.claims_report import (INCONCLUSIVE, NOT_AT_SIZE, NOT_RUN, NOT_TESTABLE, REPRODUCED,
                                                REVERSED, evaluate, render_claims)

from .test_claims import _timed_rec, _write


def _pair(a, b, diffs, setting="iid", rounds=4, base=0.5):
    """Records of A and B at 1:1:1 in ``setting``, seed s with A - B = diffs[s] points."""
    out = []
    for s, d in enumerate(diffs):
        out += [_timed_rec(a, setting, s, rounds, 1.0, 0.1), _timed_rec(b, setting, s, rounds, 1.0, 0.1)]
        out[-2]["results"]["final"] = base + s / 100 + d / 100
        out[-1]["results"]["final"] = base + s / 100
    return out


def _c(a, b, fa, fb, setting="iid", note=None, not_testable=None, rounds=4):
    return Claim("p", "T", "task", a, b, "1:1:1", (("rounds", str(rounds)),), "g", setting, setting.upper(), fa, fb,
                 1 if fa > fb else -1, not_testable, "sweep P", "", note)


def test_each_verdict_on_hand_built_records():
    """Six claims, one per verdict, on records built for it (5 seeds, paired A - B in points):
    A - B = 10, 10.1, 9.9, 10, 10 against the paper's +10: reproduced; the same against the paper's
    +2: not reproduced at the paper's size (larger); against the paper's -10: reversed; A - B
    = 1, -1, 2, -2, 0.5 against the paper's +1: inconclusive; no records: not run; a reason in the
    claim file: not testable here."""
    recs = (_pair("a", "b", [10, 10.1, 9.9, 10, 10]) + _pair("c", "d", [1, -1, 2, -2, 0.5])
            + _pair("e", "f", [10, 10.1, 9.9, 10, 10], rounds=8))
    claims = [_c("a", "b", 60, 50), _c("a", "b", 52, 50), _c("a", "b", 40, 50), _c("c", "d", 51, 50),
              _c("x", "y", 51, 50), _c("a", "b", 60, 50, not_testable="another model"),
              _c("e", "f", 60, 50)]
    got = [o.verdict for o in evaluate(claims, recs)]
    assert got == [REPRODUCED, NOT_AT_SIZE, REVERSED, INCONCLUSIVE, NOT_RUN, NOT_TESTABLE, NOT_RUN]
    text = render_claims([("p", "P", evaluate(claims, recs))], len(recs))
    summary = next(line for line in text.splitlines() if line.startswith("7 claims: "))
    assert summary == ("7 claims: 1 reproduced, 1 not reproduced at the paper's size, 1 reversed, 1 inconclusive, "
                       "2 not run, 1 not testable here.")
    assert "Seeds: 4 of 4 tested claims at 5 or more." in text.splitlines()  # the not testable one's seeds not counted


def test_the_seed_line_counts_tested_claims_short_of_five_seeds():
    """Tested claims at 5, 3 and 2 seeds (two at 3): one at 5 or more, the others by their count."""
    recs = (_pair("a", "b", [10, 10.1, 9.9, 10, 10]) + _pair("c", "d", [1, -1, 2])
            + _pair("e", "f", [3, 2, 4]) + _pair("g", "h", [5, 6]))
    claims = [_c("a", "b", 60, 50), _c("c", "d", 51, 50), _c("e", "f", 51, 50), _c("g", "h", 51, 50),
              _c("x", "y", 51, 50)]
    text = render_claims([("p", "P", evaluate(claims, recs))], len(recs))
    assert "Seeds: 1 of 4 tested claims at 5 or more; 2 at 3; 1 at 2." in text.splitlines()
    assert not any(line.startswith("Seeds:") for line in render_claims([("p", "P", evaluate(claims[4:], recs))],
                                                                       len(recs)).splitlines())


def test_a_claim_not_run_names_the_records_at_another_budget():
    """e and f ran 8 rounds, the claim asks for 4: not run, and the report says where they are,
    with their paired A - B (+10 every seed: CI half-width 0)."""
    recs = _pair("e", "f", [10, 10, 10], rounds=8) + [_timed_rec("e", "iid", 7, 16, 1.0, 0.1)]
    (o,) = evaluate([_c("e", "f", 60, 50)], recs)
    assert o.verdict == NOT_RUN
    assert o.elsewhere == "rounds=8 (e 3 seeds, f 3 seeds; A - B +10.00 ± 0.00); rounds=16 (e 1 seed)"
    text = render_claims([("p", "P", [o])], len(recs))
    assert ("no records pair the two methods in this setting at rounds=4; records exist at another budget: "
            "rounds=8") in text


def test_a_note_about_one_methods_row_appears_on_its_claims_only(tmp_path):
    d = _write(tmp_path, """
paper: paper
blocks:
  - table: T
    task: t
    method: a
    columns: {iid: IID}
    groups: [{roc: "1:1:1", paper_group: "RoC 1:1:1", notes: {s: "the row of every RoC"},
              figures: {a: [60.0], s: [50.0], b: [40.0]}}]
""")
    claims = load_claims(d, "paper")[1]
    assert [(c.b, c.note) for c in claims] == [("s", "the row of every RoC"), ("b", None)]
    text = render_claims([("paper", "P", evaluate(claims, []))], 0)
    rows = [line for line in text.splitlines() if line.startswith("| a vs ")]
    assert "RoC 1:1:1 (s: the row of every RoC)" in rows[0] and "every RoC" not in rows[1]
    assert "Pre-fix" not in text  # no paired record predates a fix: that rule is not stated
