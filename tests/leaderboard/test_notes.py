"""The notes under a table say what its marks mean for that table: cohorts, the CI caveat
of bold, the uncorrected dagger, the memory source and an idle weakest tier."""

from __future__ import annotations

import math

from fedbench.leaderboard.generate import render_task
from fedbench.leaderboard.sections import ok_sections
from fedbench.leaderboard.table import cohort_names

from .test_generate import make, table_rows
from .test_groups import with_config


def _notes(text: str) -> str:
    return text[text.index("Notes:"):]


def _cell(method, finals, label):
    return [make(method, seed=s, final=f, label=label) for s, f in enumerate(finals)]


def test_two_cohorts_are_named_and_bold_once_per_cohort():
    # 6:3:1: fedra 81 ± 2.48 against hetlora 51: clearly ahead. 1:1:1: fedra 70 ± 24.84 against
    # hetlora 66: the runner-up lies inside fedra's CI.
    recs = (_cell("fedra", (0.80, 0.81, 0.82), "6:3:1") + _cell("hetlora", (0.50, 0.51, 0.52), "6:3:1")
            + _cell("fedra", (0.60, 0.70, 0.80), "1:1:1") + _cell("hetlora", (0.65, 0.66, 0.67), "1:1:1"))
    text = render_task("t", recs)
    rows = table_rows(text)
    half_631 = 4.302653 * 1.0 / math.sqrt(3)  # t(0.975, 2) * s / sqrt(n), s = 1 point
    half_111 = 4.302653 * 10.0 / math.sqrt(3)
    assert rows[("fedra", "6:3:1")]["iid"] == f"**81.00 ± {half_631:.2f} (3)**"
    assert rows[("fedra", "1:1:1")]["iid"] == f"**70.00 ± {half_111:.2f} (3)**"  # bold in its own cohort
    assert not rows[("hetlora", "1:1:1")]["iid"].startswith("**")
    notes = _notes(text)
    # one table per RoC group, each under its caption, ranked; one line says what bold is
    assert text.index("**RoC 1:1:1** (2 rows, ranked by Avg):") < text.index("**RoC 6:3:1** (2 rows, ranked by Avg):")
    bold = [line for line in notes.splitlines() if line.startswith("- **Bold**")]
    assert len(bold) == 1 and bold[0].startswith("- **Bold**: the best mean of its column (and Avg) within its group")
    assert "federation: `clients`, `dynamic`, `local_split`, `per_round`" in notes
    assert "budgets, each under its own heading" not in notes  # one budget
    # cells: one clear of its runner-up (81 - 51 > 2.48), one not (70 - 66 < 24.84)
    assert "1 of the 2 bold cells that have a runner-up in their group do not beat it beyond their own 95% CI" in notes
    assert "not corrected for the many cells" in notes and "`fedbench compare A --against B --task T`" in notes
    assert "best value of each setting column" not in notes


def test_every_bold_cell_clear_and_one_cohort():
    recs = _cell("fedra", (0.80, 0.81, 0.82), "6:3:1") + _cell("hetlora", (0.50, 0.51, 0.52), "6:3:1")
    notes = _notes(render_task("t", recs))
    assert "each of the 1 bold cells that have a runner-up in their group beats it beyond its own 95% CI" in notes
    assert "budgets, each under its own heading" not in notes


def test_cohorts_of_one_label_are_named_by_their_federation():
    recs = [with_config(make(m, seed=0, final=0.5, label=""), clients=n) for m in ("fd", "fedlora") for n in (10, 50)]
    sec = ok_sections("t", recs)[2][0]
    assert sorted(cohort_names(sec.rows).values()) == ["RoC -, clients=10", "RoC -, clients=50"]
    text = render_task("t", recs)
    assert "This task has 2 budgets, each under its own heading: clients=10; clients=50." in text
    assert text.index("## Budget: clients=10") < text.index("## Budget: clients=50")


def tiered_record(method, final, tiers_trained, traffic):
    """A 3-tier run whose ``tiers_trained`` report FLOPs; ``traffic``: per tier MB/round."""
    rec = make(method, final=final)
    rec["run"]["tiers"] = [{"tier": t, "layers": None, "rank": None, "fraction": None} for t in (0, 1, 2)]
    rec["cost"]["tflops_per_step"]["by_tier"] = {str(t): {"mean": 0.01 * (t + 1), "forward": 0.0, "backward": 0.0}
                                                 for t in tiers_trained}
    rec["cost"]["traffic_mb_per_client_round"]["by_tier"] = {str(t): {"down": v / 2, "up": v / 2, "total": v}
                                                             for t, v in enumerate(traffic)}
    return rec


def test_an_idle_weakest_tier_is_explained_and_off_the_pareto_front():
    recs = [tiered_record("exclusive", 0.9, (2,), (0.0, 0.0, 1.25)),
            tiered_record("fedavg", 0.8, (0, 1, 2), (1.25,) * 3),
            tiered_record("all_small", 0.5, (0, 1, 2), (0.66,) * 3)]
    text = render_task("t", recs)
    costs = table_rows(text.split("## Costs")[1])
    assert costs[("exclusive", "6:3:1")]["TFLOPs/step weak"] == "-"
    assert costs[("exclusive", "6:3:1")]["Traffic/round weak"] == "0 MB"
    assert costs[("exclusive", "6:3:1")]["Pareto"] == ""
    assert costs[("fedavg", "6:3:1")]["Pareto"] == "✓"  # exclusive's better Avg does not knock it off
    assert ("`exclusive 6:3:1`: the weakest tier never trains (its clients never take part), so its weakest-tier "
            "TFLOPs/step and Mem are `-` and its weakest-tier Traffic/round is 0.") in _notes(text)


def test_memory_source_is_named():
    a, b = make("fedra", final=0.5), make("fedavg", final=0.6)
    assert "Mem = peak memory of one client step, accounted (" in _notes(render_task("t", [a, b]))
    b["cost"]["peak_mem_source"] = "cuda"
    text = render_task("t", [a, b])
    costs = table_rows(text.split("## Costs")[1])
    assert costs[("fedavg", "6:3:1")]["Mem source"] == "cuda" and costs[("fedra", "6:3:1")]["Mem source"] == "accounted"
    assert "`accounted` = accounted (parameters" in _notes(text)
    assert "`cuda` = measured on CUDA (the allocator's peak" in _notes(text)


def test_settings_are_explained():
    text = render_task("t", [make(setting="2/-"), make(setting="20/1.0"), make(setting="odd")])
    assert ("Settings: `2/-` = 2 classes per client, equal shares; `20/1.0` = 20 classes per client, quantities by "
            "Dirichlet(1.0).") in text
