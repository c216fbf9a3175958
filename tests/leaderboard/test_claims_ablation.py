"""The ablations under a claim file's ``explained_by`` (leaderboard/claims_ablation.py): read
from the claim file, measured from hand-built records, printed under the claim's table."""

import math

import pytest

from fedbench.errors import UserError
from fedbench.leaderboard.claims import load_claims
from fedbench.leaderboard.claims_report import build_report
from fedbench.leaderboard.stats import t_quantile_975

from .test_claims import spec_has
from .test_generate import make

CLAIMS = """
paper: paper
blocks:
  - table: T1
    task: t
    method: a
    columns: {iid: IID, 20/1.0: N}
    groups:
      - roc: "6:3:1"
        where: {rounds: 50, method.rule: paper}
        figures: {a: [60.0, 60.0], b: [0.0, 0.0]}
        explained_by:
          b:
            kind: measurement
            text: the rule
            ablations:
%s
"""
RULE = """              - factor: the authors' rule
                settings: [iid]
                arm: {method.rule: authors}
                methods: [b]
                command: fedbench sweep x.yaml --only setting={setting}"""
ROUNDS = """              - factor: more rounds
                settings: [iid, 20/1.0]
                arm: {rounds: 150}"""


def rec(method, seed, final, rounds=50, rule=None, setting="iid"):
    r = make(method, setting, seed, final)
    r["run"]["run_id"] = f"{method}-{setting}-{seed}-{rounds}-{rule}"
    r["run"]["run_config"]["rounds"] = rounds
    if rule is not None:
        r["run"]["method_config"]["rule"] = rule
    return r


def report(tmp_path, ablations, records):
    (tmp_path / "paper.yaml").write_text(CLAIMS % ablations)
    return build_report(tmp_path, records, ["paper"]).split("Explained by:")[1]


def test_an_arm_for_one_method_measures_the_change_of_the_gap(tmp_path):
    """A leads B by 1, 0, 2 points (seeds 0-2) at B's paper rule and by 30, 27, 33 with B's
    authors' rule: the change 29, 27, 31 is 29 +- t(2) * 2 / sqrt 3, 29 / (60 - 1) of the way
    to the paper's gap; A's row is the same in both (the arm is B's only)."""
    recs = [rec("a", s, v) for s, v in enumerate((0.50, 0.52, 0.54))]
    recs += [rec("b", s, v, rule="paper") for s, v in enumerate((0.49, 0.52, 0.52))]
    recs += [rec("b", s, v, rule="authors") for s, v in enumerate((0.20, 0.25, 0.21))]
    text = report(tmp_path, RULE, recs)
    half = t_quantile_975(2) * 2.0 / math.sqrt(3)
    assert (f"    - the authors' rule (method.rule=authors for b only), iid: A - B +1.00 ± "
            f"{t_quantile_975(2) * 1.0 / math.sqrt(3):.2f} (3 seeds) at the claim's fields, +30.00 ± {half * 1.5:.2f} "
            f"(3 seeds) with the arm; the paper's A - B +60.00; the change +29.00 ± {half:.2f} "
            "(paired over seeds 0, 1, 2, p ") in text
    assert f"moves the gap toward the paper's, {100 * 29 / 59:.0f} % of the way" in text


def test_the_share_of_the_way_starts_from_the_base_gap_over_the_changes_seeds(tmp_path):
    """Seeds 3-4 at the claim's fields only (gaps 10, 10): the base gap is 4.6 over 5 seeds, but
    the change (29, over seeds 0-2) is 29 / (60 - 1) of the way from the base's 1 on those seeds,
    not 29 / (60 - 4.6); the line says where the share starts."""
    recs = [rec("a", s, v) for s, v in enumerate((0.50, 0.52, 0.54, 0.50, 0.50))]
    recs += [rec("b", s, v, rule="paper") for s, v in enumerate((0.49, 0.52, 0.52, 0.40, 0.40))]
    recs += [rec("b", s, v, rule="authors") for s, v in enumerate((0.20, 0.25, 0.21))]
    text = report(tmp_path, RULE, recs)
    assert "iid: A - B +4.60 ± " in text and "(5 seeds) at the claim's fields" in text
    assert (f"moves the gap toward the paper's, {100 * 29 / (60 - 1):.0f} % of the way (from our gap over those "
            "seeds, +1.00)") in text
    assert f"{100 * 29 / (60 - 4.6):.0f} % of the way" not in text


AGAINST = RULE + """
              - factor: the authors' rule at 150 rounds
                settings: [iid]
                arm: {method.rule: authors, rounds: 150}
                methods: [b]
                against: the authors' rule"""


def test_an_arm_against_another_arm_measures_the_change_from_that_arms_gap(tmp_path):
    """B's authors' rule: gaps 30, 27, 33; the same at 150 rounds: B 0.10, 0.20, 0.15, gaps 40,
    32, 39; the change from the first arm 10, 5, 6: mean 7, sd sqrt((9 + 4 + 1) / 2), 7 / (60 - 30)
    of the way to the paper's gap from the first arm's."""
    recs = [rec("a", s, v) for s, v in enumerate((0.50, 0.52, 0.54))]
    recs += [rec("b", s, v, rule="paper") for s, v in enumerate((0.49, 0.52, 0.52))]
    recs += [rec("b", s, v, rule="authors") for s, v in enumerate((0.20, 0.25, 0.21))]
    recs += [rec("b", s, v, rounds=150, rule="authors") for s, v in enumerate((0.10, 0.20, 0.15))]
    text = report(tmp_path, AGAINST, recs)
    t = t_quantile_975(2) / math.sqrt(3)
    assert (f"    - the authors' rule at 150 rounds (method.rule=authors, rounds=150 for b only), iid: A - B "
            f"+30.00 ± {t * 3.0:.2f} (3 seeds) with the arm 'the authors' rule', +37.00 ± {t * math.sqrt(19):.2f} "
            f"(3 seeds) with the arm; the paper's A - B +60.00; the change +7.00 ± {t * math.sqrt(7):.2f} "
            f"(paired over seeds 0, 1, 2, p ") in text
    assert f"moves the gap toward the paper's, {100 * 7 / 30:.0f} % of the way" in text
    # the first arm still measures its change from the claim's fields
    assert "the authors' rule (method.rule=authors for b only), iid: A - B +1.00" in text


def test_an_arm_for_both_methods_that_moves_nothing_states_its_power(tmp_path):
    """rounds 150 for A and B: gaps 1, 0, 2 then 2, 0, 1: change 1, 0, -1, mean 0, sd 1."""
    recs = [rec(m, s, v, rounds=r, rule="paper" if m == "b" else None)
            for m, r, vals in (("a", 50, (0.50, 0.52, 0.54)), ("b", 50, (0.49, 0.52, 0.52)),
                               ("a", 150, (0.60, 0.60, 0.60)), ("b", 150, (0.58, 0.60, 0.59)))
            for s, v in enumerate(vals)]
    text = report(tmp_path, ROUNDS, recs)
    half = t_quantile_975(2) * 1.0 / math.sqrt(3)
    assert (f"the change +0.00 ± {half:.2f} (paired over seeds 0, 1, 2, p 1): no move resolved "
            f"(these seeds resolve a change beyond ±{half:.2f})") in text
    # 20/1.0 has no records: the arm is listed, not measured
    assert ("    - more rounds (rounds=150), 20/1.0: not measured yet (A and B share 0 of the arm's seeds, 2 needed; "
            "cost not estimated (no timed record for a))") in text


def test_an_arm_with_one_seed_is_not_measured_and_gives_its_command(tmp_path):
    recs = [rec("a", s, 0.5) for s in (0, 1)] + [rec("b", s, 0.4, rule="paper") for s in (0, 1)]
    recs.append(rec("b", 0, 0.1, rule="authors"))
    text = report(tmp_path, RULE, recs)
    assert ("iid: not measured yet (A and B share 1 of the arm's seeds, 2 needed; run: "
            "`fedbench sweep x.yaml --only setting=iid`; cost not estimated (no timed record for a))") in text


def test_an_arm_not_measured_yet_gives_the_cost_of_its_runs_to_3_seeds(tmp_path):
    """A (20 s/round) and B (30 s/round) at 50 rounds, seeds 0-2; at 150 rounds only A's seed 0:
    the arm needs A 2 runs and B 3 runs of 150 rounds, (2 x 20 + 3 x 30) x 150 s = 325 CPU-min,
    each timed from its own 50-round records (s/round does not depend on rounds)."""
    def timed(m, s, rounds, spr):
        r = rec(m, s, 0.5, rounds=rounds, rule="paper" if m == "b" else None)
        r["run"]["rounds_completed"] = rounds
        r["cost"]["seconds_total"] = rounds * spr
        return r

    recs = [timed(m, s, 50, spr) for m, spr in (("a", 20.0), ("b", 30.0)) for s in range(3)]
    text = report(tmp_path, ROUNDS, recs + [timed("a", 0, 150, 20.0)])
    assert ("    - more rounds (rounds=150), iid: not measured yet (A and B share 0 of the arm's seeds, 2 needed; "
            "3 seeds need 5 runs, est. 325 CPU-min)") in text


@pytest.mark.parametrize("ablations, problem", [
    (RULE.replace("[iid]", "[dir]"), "settings must list columns of the block"),
    (RULE.replace("{method.rule: authors}", "{}"), "needs a factor and a non-empty arm"),
    (RULE.replace("factor: the authors' rule", "factor: ' '"), "needs a factor and a non-empty arm"),
    (RULE.replace("methods: [b]", "methods: [c]"), r"methods must name the claim's methods \(a, b\)"),
    (RULE.replace("methods: [b]", "methods: b"), r"line 20: .*ablations\[1\].methods: expected a list"),
    ("              []", "a measurement needs ablations"),
    (AGAINST.replace("against: the authors' rule", "against: more rounds"), "against must name another factor"),
    (AGAINST.replace("                settings: [iid]\n                arm: {method.rule: authors, rounds",
                     "                settings: [20/1.0]\n                arm: {method.rule: authors, rounds"),
     "against must name another factor of these ablations, with setting 20/1.0"),
    (AGAINST.replace("command: fedbench sweep x.yaml --only setting={setting}",
                     "against: the authors' rule at 150 rounds"), "ablation 1: against must name another factor"),
    (RULE.replace("--only setting={setting}", "--only method={B}"), r"ablation 1: .* may name only \{a\}, \{b\}"),
    (RULE.replace("methods: [b]", 'methods: ["{c}"]'), r"ablation 1: .* may name only \{a\}, \{b\}"),
])
def test_a_bad_ablation_is_a_one_line_error(tmp_path, ablations, problem):
    (tmp_path / "paper.yaml").write_text(CLAIMS % ablations)
    with pytest.raises(UserError, match=problem):
        load_claims(tmp_path, "paper")


def test_one_ablation_per_setting(tmp_path):
    (tmp_path / "paper.yaml").write_text(CLAIMS % ROUNDS)
    _, claims = load_claims(tmp_path, "paper")
    abl = claims[0].explained_by.ablations
    assert [(a.factor, a.setting, a.arm, a.methods) for a in abl] == [
        ("more rounds", "iid", (("rounds", "150"),), ()), ("more rounds", "20/1.0", (("rounds", "150"),), ())]
    assert abl[0].where(claims[0].where, "a") == (("method.rule", '"paper"'), ("rounds", "150"))


def test_methods_and_command_take_the_claims_b_and_roc_so_one_anchored_list_serves_several(tmp_path):
    shared = RULE.replace("methods: [b]", 'methods: ["{b}"]').replace("[iid]", "[iid, 20/1.0]").replace(
        "--only setting={setting}", "--only method={a},{b} --only roc={roc} --only setting={setting}")
    (tmp_path / "paper.yaml").write_text(CLAIMS % shared)
    ab, ab2 = load_claims(tmp_path, "paper")[1][0].explained_by.ablations
    assert ab.methods == ("b",)
    assert ab.command == "fedbench sweep x.yaml --only method=a,b --only roc=6:3:1 --only setting=iid"
    assert ab2.command == "fedbench sweep x.yaml --only method=a,b --only roc=6:3:1 --only setting=20/1.0"


def test_each_ablations_command_selects_its_arm_from_its_preset(tmp_path):
    """The command printed for an ablation not measured yet is a real one: from the named preset
    it selects runs of the claim's methods at the ablation's setting and resource group, and for
    each method it selects, 3 seeds with the arm's fields (a method field only where the method
    has it, as ``--only`` compares), and besides them only runs of the claim's own cell (the
    arm's baseline, which a clean records folder needs too). With or without ``../shared``
    (:func:`smoke.preset_here`)."""
    import shlex
    from pathlib import Path

    from smoke import preset_here

    from fedbench.runners.core.sweep import load_sweep, select

    root = Path(__file__).resolve().parents[2]
    presets: dict = {}
    checked = 0
    for c in load_claims(root / "leaderboard" / "claims", "fed_hello")[1]:
        for ab in (c.explained_by.ablations if c.explained_by else ()):
            if ab.setting != c.setting or not ab.command:
                continue
            argv = shlex.split(ab.command)
            assert argv[:2] == ["fedbench", "sweep"], ab.command
            if argv[2] not in presets:
                presets[argv[2]] = load_sweep(preset_here(root / argv[2], tmp_path))
            runs = select(presets[argv[2]], [argv[i + 1] for i, a in enumerate(argv) if a == "--only"])
            methods = {r.spec.method for r in runs}
            assert methods and methods <= {c.a, c.b}, ab
            assert {r.spec.run.setting for r in runs} == {ab.setting}
            assert {r.spec.run.roc or "-" for r in runs} == {c.roc}
            for m in methods:
                mine = [r for r in runs if r.spec.method == m]
                arm = [r for r in mine if spec_has(r.spec, ab.where(c.where, m))]
                assert sorted(r.spec.run.seed for r in arm) == [0, 1, 2], (ab, m)
                other = [r for r in mine if r not in arm]
                assert all(spec_has(r.spec, c.where) for r in other), (ab, m, "selects runs of neither the arm nor the claim's cell")
            checked += 1
    assert checked >= 12
