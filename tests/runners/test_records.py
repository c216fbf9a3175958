"""Result records: validation (dotted-path errors), atomic writes, loading a tree."""

from __future__ import annotations

import json
import logging
import math
import os

import pytest

from fedbench.integrity import content_hash
from fedbench.errors import UserError
from fedbench.records import (
    SCHEMA_VERSION,
    RecordError,
    empty_record,
    load_records,
    record_path,
    validate_record,
    write_record,
)


def full_record() -> dict:
    """A complete, valid record of a small finished run."""
    rec = empty_record()
    rec["status"] = "ok"
    rec["run"].update(
        run_id="abc123", method="fed_hello", method_config={"strategy": "fim"}, task="tiny_text",
        task_config={"n_classes": 4}, method_version=1,
        run_config=dict(setting="20/1.0", seed=0, rounds=3, roc="6:3:1", capacities=None, dynamic=False, clients=10,
                        per_round=5, local_epochs=1, batch_size=8, optimizer="adamw", lr=1e-3, eval_every=1),
        n_clients=10, clients_per_round=5, rounds_completed=3, device="cpu", runner="local",
        created_at="2025-01-01T00:00:00Z", fedbench_version="0.1.0", git_commit="deadbeef",
        git_dirty=False, partition_fingerprint="0f0f", client_tiers={"0": 0, "1": 2},
        tiers=[{"tier": 0, "layers": 2, "rank": None, "fraction": 0.6},
               {"tier": 2, "layers": 4, "rank": None, "fraction": 0.1}],
        resource_label="6:3:1",
    )
    rec["results"].update(
        metric_name="macro_f1", final=0.7, best=0.72, best_round=2, per_domain=None,
        extra={"micro_f1": 0.8},
        curve=[{"round": 1, "metric": 0.5, "train_loss": 1.2},
               {"round": 2, "metric": 0.72, "train_loss": 0.9},
               {"round": 3, "metric": 0.7, "train_loss": None}],
    )
    cost = rec["cost"]
    cost["tflops_per_step"].update(mean=3e-5, forward_mean=1e-5, backward_mean=2e-5,
                                   by_tier={"0": {"mean": 2e-5, "forward": 1e-5, "backward": 1e-5}})
    cost.update(tflops_total=0.01, server_tflops_total=None, flops_source="flop_counter",
                peak_mem_source="accounted", traffic_mb_total=3.0, seconds_per_round=0.5,
                seconds_total=1.5, seconds_per_client_step=0.01, server_seconds_total=0.1)
    cost["peak_mem_gb"].update(mean=0.1, max=0.2, by_tier={"0": {"mean": 0.1, "max": 0.2}})
    cost["accounted_mem_gb"].update(mean=0.1, max=0.2, by_tier={"0": {"mean": 0.1, "max": 0.2}})
    cost["traffic_mb_per_client_round"].update(down=0.1, up=0.1, total=0.2,
                                               by_tier={"0": {"down": 0.1, "up": 0.1, "total": 0.2}})
    rec["env"].update(python="3.11.9", torch="2.4.0", transformers=None, peft=None, timm=None, gpu="cpu")
    return rec


def test_full_record_and_empty_skeleton_are_valid():
    validate_record(full_record())
    skeleton = empty_record()
    validate_record(skeleton)
    assert skeleton["schema_version"] == SCHEMA_VERSION == 2
    assert skeleton["status"] == "failed" and skeleton["error"] is None
    assert empty_record() is not skeleton and empty_record()["run"] is not skeleton["run"]


def _rejects(rec: dict, message_start: str) -> str:
    with pytest.raises(RecordError) as info:
        validate_record(rec)
    assert str(info.value).startswith(message_start), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("path", [
    "schema_version", "status", "error", "run", "run.run_config.seed", "run.method_version", "run.client_tiers",
    "run.resource_label",
    "results.curve", "cost.peak_mem_gb.mean", "cost.traffic_mb_per_client_round.by_tier", "env.gpu",
])
def test_missing_key_is_named(path):
    rec = full_record()
    *parents, last = path.split(".")
    node = rec
    for key in parents:
        node = node[key]
    del node[last]
    _rejects(rec, f"{path}: missing required key")


def test_missing_key_in_list_item_and_map_value():
    rec = full_record()
    del rec["results"]["curve"][1]["train_loss"]
    _rejects(rec, "results.curve[1].train_loss: missing required key")
    rec = full_record()
    del rec["cost"]["tflops_per_step"]["by_tier"]["0"]["forward"]
    _rejects(rec, "cost.tflops_per_step.by_tier.0.forward: missing required key")


@pytest.mark.parametrize("path,value,message", [
    ("cost.peak_mem_gb.mean", "big", "cost.peak_mem_gb.mean: expected number or null, got str"),
    ("run.run_config.seed", 1.0, "run.run_config.seed: expected int, got float"),
    ("run.run_config.seed", True, "run.run_config.seed: expected int, got bool"),
    ("run.run_config.lr", None, "run.run_config.lr: expected number, got null"),
    ("run.run_config.lr", False, "run.run_config.lr: expected number, got bool"),
    ("run.run_config.dynamic", 0, "run.run_config.dynamic: expected bool, got int"),
    ("run.method_version", "1", "run.method_version: expected int, got str"),
    ("run.git_dirty", "no", "run.git_dirty: expected bool or null, got str"),
    ("run.method_config", [], "run.method_config: expected dict, got list"),
    ("run.run_config.capacities", [12, "10"], "run.run_config.capacities[1]: expected int, got str"),
    ("run.client_tiers", {"0": 1.5}, "run.client_tiers.0: expected int, got float"),
    ("run.tiers", {}, "run.tiers: expected list, got dict"),
    ("results.per_domain", {"real": None}, "results.per_domain.real: expected number, got null"),
    ("results.curve", None, "results.curve: expected list, got null"),
    ("env", "cpu", "env: expected dict, got str"),
    ("error", 3, "error: expected str or null, got int"),
])
def test_wrong_type_is_named(path, value, message):
    rec = full_record()
    *parents, last = path.split(".")
    node = rec
    for key in parents:
        node = node[key]
    node[last] = value
    _rejects(rec, message)


def test_bad_status_and_version():
    rec = full_record()
    rec["status"] = "done"
    _rejects(rec, "status: expected one of 'ok', 'failed', 'cancelled', got 'done'")
    rec = full_record()
    rec["schema_version"] = 1  # an older record is upgraded on read (fedbench.upgrade), never validated as it is
    _rejects(rec, "schema_version: unsupported version 1")
    rec = full_record()
    rec["cost"]["peak_mem_source"] = "gpu"
    _rejects(rec, "cost.peak_mem_source: expected one of 'cuda', 'accounted', got 'gpu'")
    with pytest.raises(RecordError, match="^record: expected dict, got list"):
        validate_record([])


@pytest.mark.parametrize("where", ["cost.peak_mem_gb.mean", "cost.tflops_per_step.by_tier.0.mean",
                                   "results.final", "results.extra.micro_f1"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_is_an_error_only_for_ok(where, bad):
    rec = full_record()
    *parents, last = where.split(".")
    node = rec
    for key in parents:
        node = node[key]
    node[last] = bad
    _rejects(rec, f"{where}: non-finite number")
    rec["status"] = "failed"
    validate_record(rec)


def test_nonfinite_in_curve_path():
    rec = full_record()
    rec["results"]["curve"][2]["train_loss"] = math.nan
    _rejects(rec, "results.curve[2].train_loss: non-finite number (nan) not allowed when status is 'ok'")


@pytest.mark.parametrize("rounds,message", [
    ([1, 2, 2], "results.curve[2].round: rounds must be strictly increasing, got 2 after 2"),
    ([1, 3, 2], "results.curve[2].round: rounds must be strictly increasing, got 2 after 3"),
])
def test_curve_rounds_strictly_increase(rounds, message):
    rec = full_record()
    for point, r in zip(rec["results"]["curve"], rounds):
        point["round"] = r
    _rejects(rec, message)


def test_rounds_completed_at_most_rounds():
    rec = full_record()
    rec["run"]["rounds_completed"] = 4
    _rejects(rec, "run.rounds_completed: 4 exceeds run.run_config.rounds (3)")


def test_extra_keys_are_allowed():
    rec = full_record()
    rec["run"]["note"] = "newer writer"
    rec["cost"]["energy_j"] = 1.0
    validate_record(rec)
    with pytest.raises(RecordError, match="^run.note: not a field of the record schema"):
        validate_record(rec, strict=True)


def test_run_config_holds_every_config_field_once():
    """run_config is open: a RunConfig field the schema does not type (eval_every) is written as it
    is, even strictly; the run fields it holds are not written a second time beside it."""
    rec = full_record()
    validate_record(rec, strict=True)
    moved = ("setting", "seed", "rounds", "roc", "capacities", "dynamic", "local_epochs", "batch_size", "optimizer",
             "lr", "variant")
    assert not set(moved) & set(rec["run"]) and set(moved[:-1]) <= set(rec["run"]["run_config"])


def test_optional_initial_evaluation():
    rec = full_record()
    rec["results"]["initial"] = None
    validate_record(rec)
    rec["results"]["initial"] = {"metric": 0.1, "per_domain": None, "extra": {}}
    validate_record(rec)
    rec["results"]["initial"] = {"metric": "0.1", "per_domain": None, "extra": {}}
    _rejects(rec, "results.initial.metric: expected")
    rec["results"]["initial"] = {"metric": float("nan"), "per_domain": None, "extra": {}}
    _rejects(rec, "results.initial.metric: non-finite")


def test_record_path():
    rec = full_record()
    assert record_path("/r", rec).as_posix() == "/r/tiny_text/fed_hello/abc123.json"
    rec["run"]["run_id"] = "../escape"
    with pytest.raises(RecordError, match="^run.run_id:"):
        record_path("/r", rec)
    with pytest.raises(RecordError, match="^run.task:"):
        record_path("/r", empty_record())


# --------------------------------------------------------------------------- writing


def test_write_record_round_trip_and_format(tmp_path):
    rec = full_record()
    path = write_record(rec, tmp_path / "a" / "b" / "run.json")
    assert path == tmp_path / "a" / "b" / "run.json"
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n") and not text.endswith("\n\n")
    sealed = {**rec, "integrity": {"sha256": content_hash(rec)}}  # fedbench.integrity: checked on reading
    assert text == json.dumps(sealed, sort_keys=True, indent=2) + "\n"
    assert json.loads(text) == sealed
    assert os.listdir(path.parent) == ["run.json"]  # no temp file left behind


def test_write_nan_in_failed_record_becomes_null(tmp_path):
    rec = full_record()
    rec["status"], rec["error"] = "failed", "non-finite loss at round 3"
    rec["results"]["curve"][2]["train_loss"] = math.nan
    rec["cost"]["seconds_per_round"] = math.inf
    rec["run"]["method_config"] = {"mu": math.nan}
    path = write_record(rec, tmp_path / "run.json")
    text = path.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    back = json.loads(text)
    assert back["results"]["curve"][2]["train_loss"] is None
    assert back["cost"]["seconds_per_round"] is None
    assert back["run"]["method_config"] == {"mu": None}
    assert math.isnan(rec["results"]["curve"][2]["train_loss"])  # caller's dict untouched
    validate_record(back)


def test_write_rejects_invalid_and_ok_with_nan(tmp_path):
    rec = full_record()
    rec["results"]["final"] = math.nan
    with pytest.raises(RecordError, match="^results.final: non-finite"):
        write_record(rec, tmp_path / "run.json")
    rec = full_record()
    del rec["env"]
    with pytest.raises(RecordError, match="^env: missing"):
        write_record(rec, tmp_path / "run.json")
    assert list(tmp_path.iterdir()) == []


def test_write_normalises_tuples_and_int_keys(tmp_path):
    rec = full_record()
    rec["run"]["run_config"]["capacities"] = (12, 10, 8)
    rec["run"]["client_tiers"] = {0: 0, 1: 2}
    back = json.loads(write_record(rec, tmp_path / "r.json").read_text())
    assert back["run"]["run_config"]["capacities"] == [12, 10, 8]
    assert back["run"]["client_tiers"] == {"0": 0, "1": 2}
    rec["run"]["method_config"] = {"path": object()}
    with pytest.raises(RecordError, match="^run.method_config.path: value of type object"):
        write_record(rec, tmp_path / "r.json")


def test_write_is_atomic_old_file_survives_failed_write(tmp_path, monkeypatch):
    path = write_record(full_record(), tmp_path / "run.json")
    before = path.read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    rec = full_record()
    rec["results"]["final"] = 0.1
    with pytest.raises(OSError, match="disk full"):
        write_record(rec, path)
    assert path.read_bytes() == before  # old content intact, never a partial file
    assert os.listdir(tmp_path) == ["run.json"]  # temp file cleaned up


def test_write_overwrites_existing(tmp_path):
    path = write_record(full_record(), tmp_path / "run.json")
    rec = full_record()
    rec["results"]["final"] = 0.25
    write_record(rec, path)
    assert json.loads(path.read_text())["results"]["final"] == 0.25
    assert os.listdir(tmp_path) == ["run.json"]


# --------------------------------------------------------------------------- loading


def test_load_records_skips_junk(tmp_path, caplog):
    good = full_record()
    write_record(good, record_path(tmp_path, good))
    other = full_record()
    other["run"]["run_id"] = "zzz"
    write_record(other, record_path(tmp_path, other))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    wrong = full_record()
    del wrong["cost"]["seconds_total"]
    (tmp_path / "tiny_text" / "wrong.json").write_text(json.dumps(wrong))
    (tmp_path / "notes.txt").write_text("ignored: not json")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "copy.json").write_text(json.dumps(good))

    with caplog.at_level(logging.WARNING, logger="fedbench.records"):
        recs = load_records(tmp_path)
    assert [r["run"]["run_id"] for r in recs] == ["abc123", "zzz"]  # sorted by path
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "broken.json" in messages and "list.json" in messages
    assert "cost.seconds_total: missing required key" in messages
    assert "copy.json" not in messages and "notes.txt" not in messages
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_load_records_skips_saved_models_and_tracker_logs(tmp_path, caplog):
    """``--save-model`` writes ``<run_id>.adapter/adapter_config.json`` beside the record and
    ``--log wandb`` JSON files under ``<out>/logs/``: neither is a record, and neither is
    warned about (a ``logs`` folder deeper down is walked as any other)."""
    good = full_record()
    path = record_path(tmp_path, good)
    write_record(good, path)
    (path.parent / "abc123.adapter").mkdir()
    (path.parent / "abc123.adapter" / "adapter_config.json").write_text('{"r": 8}')
    (tmp_path / "logs" / "wandb").mkdir(parents=True)
    (tmp_path / "logs" / "wandb" / "wandb-summary.json").write_text("{}")
    (tmp_path / "tiny_text" / "logs").mkdir()
    (tmp_path / "tiny_text" / "logs" / "stray.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="fedbench.records"):
        recs = load_records(tmp_path)
    assert [r["run"]["run_id"] for r in recs] == ["abc123"]
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "adapter_config.json" not in messages and "wandb-summary.json" not in messages
    assert "stray.json" in messages


def test_load_records_missing_root(tmp_path):
    with pytest.raises(UserError, match="records directory not found"):
        load_records(tmp_path / "nope")
    assert load_records(tmp_path) == []
