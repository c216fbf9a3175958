"""benchmarks/gpu_check.py: the CPU smoke run writes every section, a tiny budget stops every
section cleanly with the report still written, and the comparisons and averages it reports
are the arithmetic they say."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"correctness", "speed", "cost", "slice", "budget"}
HEADINGS = ("## 1. Correctness", "## 2. Speed", "## 3. Cost", "## 4. A slice of real work", "## 5. Budget")


def gpu_check(out: Path, *args: str, timeout: int) -> tuple[dict, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--quick",
                        "--out", str(out), *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))
    return report, (out / "gpu_check.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_quick_cpu_run_measures_every_section_and_marks_the_figures_cpu(tmp_path):
    """~2 minutes on a loaded 2-core machine: every section runs to the end (a budget large
    enough that nothing is cut), its figures measured on the CPU."""
    report, summary = gpu_check(tmp_path, "--budget-s", "1200", timeout=1500)
    s = report["sections"]
    assert set(s) == SECTIONS
    assert {name: sec["status"] for name, sec in s.items()} == dict.fromkeys(SECTIONS, "ok")
    assert report["figures_on"].startswith("CPU")
    for name in SECTIONS - {"budget"}:
        assert s[name]["device"] == "cpu" and s[name]["measured_by"]
    rows = s["correctness"]["rows"]
    assert {(r["model"], r["method"]) for r in rows} == {("tiny_text", m) for m in
                                                         ("fedavg", "fed_hello_rgd", "fedra", "hetlora")} | {
        ("MiniLM", "fedavg")}
    assert s["correctness"]["all_pass"] and all("device_vs_cpu" not in r for r in rows)  # no CUDA: not run
    assert {(r["model"], r["precision"]) for r in s["speed"]["rows"]} == {("MiniLM", "fp32"), ("BERT-base", "fp32"),
                                                                         ("BERT-base", "bf16")}
    assert all(r["local_steps_per_s"] > 0 and r["packed_steps_per_s"] > 0 for r in s["speed"]["rows"])
    cost = {r["method"]: r for r in s["cost"]["rows"]}
    assert set(cost) == {"fed_hello", "straggler", "fedra", "fedra_fulldepth", "hetlora", "exclusive"}
    assert set(cost["fed_hello"]["tiers"]) == {"0", "1", "2"}
    # exclusive: only clients that can train the whole (2-layer quick) model take part: tier 0 (1 layer) does not
    assert set(cost["exclusive"]["tiers"]) == {"1", "2"}
    assert all(t["run"]["layers"] == 2 for t in cost["exclusive"]["tiers"].values())
    assert cost["fed_hello"]["peak_mem_source"] == "accounted"
    assert cost["fed_hello"]["vs_paper"]["6:3:1"]["paper_tflops_backward"] == 2.04
    assert s["slice"]["here"]["rounds"] == 1 and s["slice"]["committed"]["rounds"] == 50
    assert s["budget"]["finished"] and not s["budget"]["stopped_sections"]
    for heading in HEADINGS:
        assert heading in summary, heading
    assert "CPU: no figure here is a GPU figure" in summary


def test_a_tiny_budget_stops_every_section_and_still_writes_the_report(tmp_path):
    """--stand-ins: the random-init MiniLM and synthetic texts (a lent GPU's inputs) are built, then no
    section has time to run anything."""
    report, summary = gpu_check(tmp_path, "--budget-s", "1", "--stand-ins", timeout=600)
    assert report["inputs"]["licenses"] is None and "random-init" in report["inputs"]["minilm"]
    s = report["sections"]
    assert set(s) == SECTIONS
    for name in SECTIONS - {"budget"}:
        assert s[name]["status"] == "stopped (time budget)", (name, s[name].get("error"))
        assert "time budget" in s[name]["stopped"]
    assert set(s["budget"]["stopped_sections"]) == SECTIONS - {"budget"} and s["budget"]["finished"]
    for heading in HEADINGS:
        assert heading in summary, heading


@pytest.fixture
def gpucheck(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpucheck.correctness
    import gpucheck.cost

    return gpucheck


def test_the_slice_finds_its_committed_record_where_shared_data_are_missing(gpucheck, tmp_path, monkeypatch):
    """A lent GPU without ``../shared`` (the preset's data_dir missing: the slice runs on stand-ins)
    still finds the committed CPU record of the slice's run: its run id does not hash data_dir."""
    import gpucheck.slice as sl

    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")  # ../shared/data/licenses does not resolve from here
    row = sl.preset_run()
    assert not Path(row["task_config"]["data_dir"]).is_dir()
    rec, where = sl.committed_record(row)
    assert rec is not None, where
    assert where.startswith("leaderboard/records/ledgar/fed_hello/") and rec["run"]["method"] == "fed_hello"


def _record(losses, final, tflops):
    return {"results": {"curve": [{"round": i + 1, "train_loss": x} for i, x in enumerate(losses)], "final": final},
            "cost": {"tflops_per_step": {"mean": tflops}}}


def test_differences_and_verdicts_are_the_stated_arithmetic(gpucheck):
    c = gpucheck.correctness
    a, ref = _record([2.0, 1.5], 0.50, 3.0), _record([2.0, 1.5 * (1 + 2e-6)], 0.52, 3.0)
    d = c.differences(a, ref)
    assert d["loss_rel_max"] == pytest.approx(abs(1.5 - 1.5 * (1 + 2e-6)) / (1.5 * (1 + 2e-6)))
    assert d["metric_abs"] == pytest.approx(0.02) and d["tflops_rel"] == 0.0
    assert c.verdict(d, "packed", flops_exact=True)["pass"]  # 2e-6 <= 1e-5, 0.02 <= 0.05
    assert not c.verdict(d, "packed_cpu", flops_exact=True)["pass"]  # the CPU's packed runs must be exact
    off = c.differences(_record([2.0, 1.5], 0.5, 3.3), _record([2.0, 1.5], 0.5, 3.0))
    assert off["tflops_rel"] == pytest.approx(0.3 / 3.0)
    assert not c.verdict(off, "packed", flops_exact=True)["pass"] and c.verdict(off, "device", flops_exact=False)["pass"]


def test_tier_averages_weight_by_the_roc_over_the_tiers_that_train(gpucheck):
    cost = gpucheck.cost
    tiers = {"0": {"x": 1.0}, "2": {"x": 4.0}}  # tier 1 took no part
    assert cost.weighted(tiers, "x", (0.6, 0.3, 0.1)) == pytest.approx((0.6 * 1.0 + 0.1 * 4.0) / (0.6 + 0.1))
    run = {"0": {"tflops_backward": 1.0, "peak_mem_gb": 10.0}, "1": {"tflops_backward": 2.0, "peak_mem_gb": 11.0},
           "2": {"tflops_backward": 3.0, "peak_mem_gb": 12.0}}
    plan = {t: {"tflops_backward": f["tflops_backward"] / 2, "accounted_gb": f["peak_mem_gb"] - 1} for t, f in run.items()}
    got = cost.compare_paper("fed_hello", run, plan)
    assert got["6:3:1"]["run_tflops_backward"] == pytest.approx(0.6 * 1 + 0.3 * 2 + 0.1 * 3)
    assert got["1:1:1"]["run_peak_mem_gb"] == pytest.approx((10 + 11 + 12) / 3)
    assert got["6:3:1"]["plan_accounted_gb"] == pytest.approx(0.6 * 9 + 0.3 * 10 + 0.1 * 11)
    assert (got["6:3:1"]["paper_tflops_backward"], got["6:3:1"]["paper_gb"]) == (2.04, 10.74)
    assert cost.compare_paper("fedra", run, plan)["6:3:1"]["paper_gb"] is None  # the paper's FedRA is full depth


def test_the_summary_shows_failed_rows_and_sections_beside_the_rest(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from gpucheck.report import render

    boom = {"error": "RuntimeError: boom"}
    report = {"command": "python benchmarks/gpu_check.py --out x", "created_at": "now", "device": "cuda",
              "figures_on": "cuda", "sections": {
                  "correctness": {"status": "partial: 1 of 1 rows failed", "rows": [
                      {"model": "MiniLM", "method": "fedra", **boom}]},
                  "speed": {"status": "partial: 1 of 1 rows failed", "rows": [
                      {"model": "BERT-base", "precision": "bf16", "k": 20, **boom}]},
                  "cost": {"status": "partial: 1 of 1 rows failed", "rows": [{"method": "hetlora", **boom}]},
                  "slice": {"status": "error", "error": "OSError: disk full"},
                  "budget": {"status": "running", "budget_s": 420.0}}}
    md = render(report)
    assert md.count("error: `RuntimeError: boom`") == 3
    assert "| MiniLM | fedra |" in md and "| BERT-base | bf16 | 20 |" in md and "| hetlora |" in md
    assert "error: `OSError: disk full`" in md and "## 5. Budget" in md
