"""The stub executor the bookkeeping tests run with (tests/stub.py): it trains nobody, and a
run through it still writes a valid, complete record with the stub's fixed cost."""

from fedbench.records import validate_record

from helpers import run_ok
from smoke import SMALL_TASK_CONFIGS
import stub


def test_a_stub_run_trains_nobody_and_writes_a_valid_record(tmp_path):
    run = {"rounds": 2, "clients": 3, "per_round": 3, "eval_initial": True, "out": str(tmp_path), "executor": "stub"}
    rec, path, _ = run_ok("fedavg", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"])
    validate_record(rec)
    assert set(rec["run"]["executor_placement"][0]) == {"stub"} and rec["run"]["rounds_completed"] == 2
    # nothing trained: the global model, so its score, is the initial one in every round
    assert [c["metric"] for c in rec["results"]["curve"]] == [rec["results"]["initial"]["metric"]] * 2
    assert {c["train_loss"] for c in rec["results"]["curve"]} == {stub.LOSS}
    assert rec["cost"]["tflops_per_step"]["mean"] == 2 * stub.STEP_FLOPS / 1e12
    assert rec["cost"]["traffic_mb_per_client_round"]["total"] > 0  # payloads and uploads still counted
