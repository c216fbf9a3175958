"""Record schema v2 and fedbench.upgrade: older records read in the current shape, every
committed record loads, run ids recompute unchanged, and a new record holds each run field
once with the three versions."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

import fedbench
from fedbench.leaderboard.groups import raw_variant
from fedbench.records import RecordError, load_records, read_record_file, validate_record
from fedbench.schema import SCHEMA_VERSION
from fedbench.upgrade import MOVED_RUN_FIELDS, upgrade

from smoke import SMALL_TASK_CONFIGS

REPO = Path(__file__).resolve().parents[1]
COMMITTED = sorted((REPO / "leaderboard" / "records").rglob("*.json")) + sorted(
    (REPO / "leaderboard" / "calibration").rglob("*.json"))
FIXTURES = REPO / "tests" / "leaderboard" / "fixtures" / "records"


def _v1(**run) -> dict:
    """A version-1 record as runners wrote it: the run fields beside run_config and variant."""
    return {"schema_version": 1, "status": "ok", "error": None,
            "run": {"run_id": "r", "method": "fedavg", "task": "t", "method_config": {"lora_r": 8}, "task_config": {},
                    "setting": "iid", "seed": 3, "rounds": 10, "roc": "6:3:1", "capacities": None, "dynamic": False,
                    "local_epochs": 1, "batch_size": 16, "optimizer": "adamw", "lr": 0.01, "n_clients": 12,
                    "clients_per_round": 4, **run},
            "results": {}, "cost": {}, "env": {}}


def test_v1_fields_move_into_run_config_once():
    rec = _v1(run_config={"setting": "iid", "seed": 3, "rounds": 10, "clients": 100, "per_round": 4, "lr": 0.01,
                          "eval_every": 2}, variant={"lr": 0.01, "rounds": 10})
    before = copy.deepcopy(rec)
    new = upgrade(rec)
    assert rec == before  # the caller's record is not modified
    run = new["run"]
    assert new["schema_version"] == SCHEMA_VERSION == 2 and run["method_version"] == 1
    assert not (set(MOVED_RUN_FIELDS) | {"variant"}) & set(run)
    assert run["run_config"] == {"setting": "iid", "seed": 3, "rounds": 10, "roc": "6:3:1", "capacities": None,
                                 "dynamic": False, "local_epochs": 1, "batch_size": 16, "optimizer": "adamw",
                                 "lr": 0.01, "clients": 100, "per_round": 4, "eval_every": 2}
    assert (run["n_clients"], run["clients_per_round"]) == (12, 4)  # observed, not the config's 100
    assert upgrade(new) is new  # a current record is returned as it is


def test_records_without_run_config_get_one_from_their_run_fields():
    run = upgrade(_v1())["run"]
    assert (run["run_config"]["clients"], run["run_config"]["per_round"]) == (12, 4)
    assert run["run_config"]["setting"] == "iid" and run["run_config"]["seed"] == 3


def test_a_newer_version_is_refused_and_skipped_with_a_warning(tmp_path, caplog):
    with pytest.raises(RecordError, match="^schema_version: unsupported version 3 \\(this code reads 1 to 2\\)"):
        upgrade({"schema_version": 3})
    good = FIXTURES / "tiny_text" / "fedra" / "tiny_text-fedra-iid-s0.json"
    (tmp_path / "new.json").write_text(good.read_text().replace('"schema_version": 1', '"schema_version": 3'))
    with caplog.at_level(logging.WARNING, logger="fedbench.records"):
        assert load_records(tmp_path) == []
    assert "unsupported version 3" in caplog.text


def test_a_bad_v1_record_is_named_at_its_new_place(tmp_path):
    good = FIXTURES / "tiny_text" / "fedra" / "tiny_text-fedra-iid-s0.json"
    (tmp_path / "r.json").write_text(good.read_text().replace('"seed": 0', '"seed": "zero"'))
    with pytest.raises(RecordError, match="run.run_config.seed: expected int, got str"):
        read_record_file(tmp_path / "r.json")


@pytest.mark.skipif(not COMMITTED, reason="no committed records (not a source checkout)")
def test_every_committed_record_loads_through_upgrade():
    for path in COMMITTED:
        raw = json.loads(path.read_text(encoding="utf-8"))
        rec = read_record_file(path)  # raises on any record that does not load
        validate_record(rec, strict=False)
        assert rec["schema_version"] == SCHEMA_VERSION and raw["schema_version"] in (1, SCHEMA_VERSION)
        assert not (set(MOVED_RUN_FIELDS) | {"variant"}) & set(rec["run"]), path
        assert rec["run"]["run_config"]["setting"] == raw["run"].get("setting", rec["run"]["run_config"]["setting"])
        assert rec["run"]["run_id"] == raw["run"]["run_id"] == path.stem
    assert len(load_records(REPO / "leaderboard" / "records")) == len(COMMITTED) - 2  # calibration: 2 apart


@pytest.mark.skipif(not COMMITTED, reason="no committed records (not a source checkout)")
def test_the_row_variant_is_the_one_the_runner_wrote():
    """Version-1 records that carry run.variant (written from the fields' roles) get the same
    variant from run_config, method_config and task_config after the upgrade (with the run
    fields added since at their defaults, as the version-1 reader filled them in, and the
    method and task fields added since at theirs, as the run id reads them)."""
    from fedbench.config import RESULT
    from fedbench.leaderboard.groups import _added_later, _with_later_fields

    def later(written: dict, prefix: str, registry: str, key: str, roles) -> dict:
        given = {k[len(prefix):]: v for k, v in written.items() if k.startswith(prefix)}
        return {prefix + k: v for k, v in _with_later_fields(given, registry, key, roles).items()}

    checked = 0
    for path in COMMITTED:
        run = json.loads(path.read_text(encoding="utf-8"))["run"]
        written = run.get("variant")
        if written:
            added = {**_added_later(written), **later(written, "method.", "methods", run["method"], None),
                     **later(written, "task.", "tasks", run["task"], (RESULT,))}
            canon = {k: json.dumps(v, sort_keys=True, separators=(",", ":")) for k, v in {**added, **written}.items()}
            assert raw_variant(read_record_file(path)) == {**canon, "method_version": "1"}, path
            checked += 1
    assert checked >= 100


@pytest.mark.skipif(not COMMITTED, reason="no committed records (not a source checkout)")
def test_run_ids_of_committed_records_recompute_unchanged():
    """Every committed leaderboard record written under the current run-id rule (those that
    recorded their variant) gets its own run id back from its configs, with this version of the
    suite: a release renames no finished run (run ids hash a frozen suite version). (The
    calibration records and the first leaderboard records were written under earlier rules.)"""
    from fedbench.config import RUNTIME, field_specs
    from fedbench.configs import RunConfig
    from fedbench.runners.core.spec import build_spec
    from fedbench.tasks import TASKS

    roles = {s.name: s.role for s in field_specs(RunConfig)}
    checked = 0
    for path in (p for p in COMMITTED if "calibration" not in p.parts):
        if not json.loads(path.read_text(encoding="utf-8"))["run"].get("variant"):
            continue  # written before the current rule (ids of the first records hashed other fields)
        run = read_record_file(path)["run"]
        rc = {k: v for k, v in run["run_config"].items() if roles.get(k, RUNTIME) != RUNTIME}
        task_roles = {s.name: s.role for s in field_specs(TASKS.get(run["task"]).config_cls)}
        tc = {k: v for k, v in run["task_config"].items() if task_roles.get(k, RUNTIME) != RUNTIME}
        spec = build_spec(run["method"], run["task"], rc, run["method_config"], tc)
        assert spec.run_id == run["run_id"], path
        checked += 1
    assert checked >= 100 and fedbench.__version__ != "0.1.0"


def test_a_method_version_from_2_on_changes_the_run_id(monkeypatch):
    from fedbench.methods import METHODS
    from fedbench.runners.core.spec import build_spec

    before = build_spec("fedavg", "tiny_text", {"rounds": 2}).run_id
    cls = METHODS.get("fedavg")
    monkeypatch.setattr(cls, "version", 2)
    bumped = build_spec("fedavg", "tiny_text", {"rounds": 2}).run_id
    monkeypatch.setattr(cls, "version", 1)
    assert bumped != before == build_spec("fedavg", "tiny_text", {"rounds": 2}).run_id


def test_a_new_record_holds_each_run_field_once_and_three_versions(tmp_path):
    from fedbench.methods import METHODS
    from fedbench.runners.core.spec import build_spec

    kw = dict(rounds=1, clients=2, out=str(tmp_path), task_config=SMALL_TASK_CONFIGS["tiny_text"])
    rec = fedbench.run("fedavg", "tiny_text", **kw)
    on_disk = json.loads(next(tmp_path.rglob("*.json")).read_text(encoding="utf-8"))
    for r in (rec, on_disk):
        run = r["run"]
        assert r["schema_version"] == SCHEMA_VERSION
        assert run["fedbench_version"] == fedbench.__version__
        assert run["method_version"] == METHODS.get("fedavg").version == 1
        assert not (set(MOVED_RUN_FIELDS) | {"variant"}) & set(run)
        assert set(run["run_config"]) >= {"setting", "seed", "rounds", "lr", "batch_size"}
        assert not {"out", "threads", "executor"} & set(run["run_config"])  # runtime fields are no record fields
    spec = build_spec("fedavg", "tiny_text", {"rounds": 1, "clients": 2, "out": str(tmp_path)}, None,
                      SMALL_TASK_CONFIGS["tiny_text"])
    canon = {k: json.dumps(v, sort_keys=True, separators=(",", ":")) for k, v in spec.variant().items()}
    assert raw_variant(rec) == {**canon, "method_version": "1"}  # the row variant derives from the record alone
