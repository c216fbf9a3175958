"""Trackers as callbacks (--log tensorboard / mlflow / wandb): what they write, read back."""

import json
import typing
from pathlib import Path

import pytest

import fedbench
from fedbench.configs import RunConfig
from fedbench.errors import UserError
from fedbench.runners.cli.cli import build_parser, main
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.core.spec import build_spec
from fedbench.runners.core.state import RoundLog
from fedbench.runners.core.sweep import load_sweep
from fedbench.runners.outputs.tracking import TRACKERS, MLflowTracker, final_metrics, flat_config, round_metrics

from smoke import SMALL_TASK_CONFIGS

TINY = ["--method", "fedavg", "--task", "tiny_text", "--rounds", "2", "--clients", "3",
        "--set", "task.n_train=160", "--set", "task.n_test=48", "--no-progress"]


def test_round_metrics_sum_the_rounds_clients():
    log = RoundLog(3, 0.75, 1.5, seconds=2.0, client_seconds=1.5, eval_seconds=0.25)
    a = ClientCost(client=0, tier=0, steps=2, flops_total=3e12, first_batch=8, down_bytes=2_000_000, up_bytes=1_000_000)
    b = ClientCost(client=1, tier=1, steps=1, flops_total=1e12, first_batch=8, down_bytes=500_000, up_bytes=500_000)
    assert round_metrics(log, [a, b], "top1") == {
        "score/top1": 0.75, "train_loss": 1.5, "cost/tflops": (3e12 + 1e12) / 1e12,
        "cost/traffic_mb": (2_000_000 + 1_000_000 + 500_000 + 500_000) / 1e6,
        "cost/seconds": 2.0, "cost/client_seconds": 1.5, "cost/eval_seconds": 0.25}


def test_round_metrics_leave_out_what_the_round_did_not_measure():
    log = RoundLog(1, None, None, seconds=1.0, client_seconds=1.0)
    unmeasured = ClientCost(client=0, tier=0, steps=2)  # run.measure_flops off: no first batch measured
    assert set(round_metrics(log, [unmeasured], "top1")) == {
        "cost/traffic_mb", "cost/seconds", "cost/client_seconds", "cost/eval_seconds"}


def test_final_metrics_keep_the_figures_the_record_has():
    rec = {"results": {"metric_name": "rougeL", "final": 0.25, "best": None},
           "cost": {"tflops_total": None, "traffic_mb_total": 12.5, "seconds_total": 3}}
    assert final_metrics(rec) == {"final/rougeL": 0.25, "total/traffic_mb": 12.5, "total/seconds": 3.0}


def test_flat_config_is_the_runs_identity_dotted():
    spec = build_spec("fedavg", "tiny_text", {"rounds": 2, "capacities": [6, 3], "out": "elsewhere",
                                              "log": ["tensorboard"]})
    cfg = flat_config(spec)
    assert cfg["method"] == "fedavg" and cfg["run_id"] == spec.run_id and cfg["run.rounds"] == 2
    assert cfg["run.capacities"] == "[6, 3]" and cfg["method.lora_r"] == spec.method_config.lora_r
    assert "run.out" not in cfg and "run.log" not in cfg  # runtime fields are no part of the run


def test_the_log_field_names_exactly_the_registered_trackers():
    (choices,) = typing.get_args(typing.get_type_hints(RunConfig)["log"])
    assert sorted(typing.get_args(choices)) == TRACKERS.keys()


def test_log_is_a_repeatable_flag_and_each_tracker_counts_once(tmp_path, capsys):
    args = build_parser().parse_args(["run", *TINY, "--log", "mlflow", "--log", "wandb"])
    assert getattr(args, "run.log") == ["mlflow", "wandb"]
    assert main(["run", *TINY, "--out", str(tmp_path), "--log", "tensorboard", "--log", "tensorboard"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run.log: must name each tracker once" in err
    assert main(["run", *TINY, "--out", str(tmp_path), "--log", "neptune"]) == 2
    assert "invalid choice: 'neptune'" in capsys.readouterr().err


def test_a_missing_tracker_package_is_one_line_with_the_extra_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(MLflowTracker, "packages", ("fedbench_no_such_package",))
    assert main(["run", *TINY, "--out", str(tmp_path), "--log", "mlflow"]) == 2
    err = capsys.readouterr().err
    assert err == ("fedbench: error: --log mlflow needs the fedbench_no_such_package package: "
                   "pip install 'fedbench-peft[mlflow]'\n")
    assert not list(tmp_path.rglob("*.json"))  # nothing ran
    with pytest.raises(UserError, match=r"fedbench-peft\[mlflow\]"):
        fedbench.run("fedavg", "tiny_text", rounds=1, clients=2, log=["mlflow"], out=str(tmp_path))


def test_a_sweep_preset_sets_trackers_and_save_model_in_its_run_section(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("task: tiny_text\nmethods: [fedavg, fedra]\nrun: {rounds: 1, save_model: true, "
                      "log: [tensorboard]}\n")
    runs = load_sweep(str(preset), out=str(tmp_path))
    assert len(runs) == 2 and all(r.spec.run.save_model and r.spec.run.log == ["tensorboard"] for r in runs)


def test_log_tensorboard_writes_the_per_round_score_and_costs(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert main(["run", *TINY, "--out", str(tmp_path), "--log", "tensorboard"]) == 0
    rec = json.loads(next((tmp_path / "tiny_text").rglob("*.json")).read_text())
    run_dir = tmp_path / "logs" / "tensorboard" / "tiny_text" / "fedavg" / rec["run"]["run_id"]
    assert list(run_dir.glob("events.out.tfevents.*"))
    ea = EventAccumulator(str(run_dir))
    ea.Reload()
    score = [(e.step, e.value) for e in ea.Scalars("score/top1")]
    assert score == [(c["round"], pytest.approx(c["metric"])) for c in rec["results"]["curve"]]
    loss = [e.value for e in ea.Scalars("train_loss")]
    assert loss == [pytest.approx(c["train_loss"]) for c in rec["results"]["curve"]]
    assert [e.step for e in ea.Scalars("cost/traffic_mb")] == [1, 2]
    assert ea.Scalars("total/traffic_mb")[0].value == pytest.approx(rec["cost"]["traffic_mb_total"])
    config = ea.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert json.loads(config)["run_id"] == rec["run"]["run_id"]


def test_log_mlflow_from_the_api_writes_a_run_with_params_and_metrics(tmp_path, monkeypatch):
    for p in MLflowTracker.packages:
        pytest.importorskip(p)
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rec = fedbench.run("fedavg", "tiny_text", rounds=2, clients=3, log=["mlflow"], out=str(tmp_path),
                       task_config=SMALL_TASK_CONFIGS["tiny_text"])
    client = MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'logs' / 'mlflow' / 'mlflow.db').resolve()}")
    (run,) = client.search_runs([client.get_experiment_by_name("fedbench/tiny_text").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == f"fedavg/{rec['run']['run_id']}"
    assert run.data.params["run.rounds"] == "2"
    score = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "score/top1")]
    assert score == [(c["round"], pytest.approx(c["metric"])) for c in rec["results"]["curve"]]


def _wandb_records(path: Path) -> list:
    """The records of a wandb run file (LevelDB log blocks of 32 KiB after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, buf, out = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        size, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if left < 7 or (size == 0 and kind == 0):  # block trailer / padding
            pos += left
            continue
        buf, pos = buf + data[pos + 7:pos + 7 + size], pos + 7 + size
        if kind in (1, 4):  # a full record, or the last piece of one
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def test_log_wandb_offline_writes_the_history_and_the_summary(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    rec = fedbench.run("fedavg", "tiny_text", rounds=2, clients=3, log=["wandb"], out=str(tmp_path),
                       task_config=SMALL_TASK_CONFIGS["tiny_text"])
    (run_file,) = (tmp_path / "logs" / "wandb").glob("offline-run-*/*.wandb")
    records = _wandb_records(run_file)
    key = lambda item: item.key or "/".join(item.nested_key)  # noqa: E731 - wandb fills one of the two
    history = [{key(i): json.loads(i.value_json) for i in r.history.item} for r in records
               if r.WhichOneof("record_type") == "history"]
    assert [(h["_step"], h["score/top1"]) for h in history] == \
        [(c["round"], pytest.approx(c["metric"])) for c in rec["results"]["curve"]]
    summary = {key(i): json.loads(i.value_json) for r in records if r.WhichOneof("record_type") == "summary"
               for i in r.summary.update}
    assert summary["status"] == "ok" and summary["final/top1"] == pytest.approx(rec["results"]["final"])
