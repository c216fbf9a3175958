"""Ray sweeps that lose nothing: a bad ``--address`` is one line, a sweep stopped by SIGTERM
(started with SIGINT ignored) records every run in flight ``cancelled``, and a sweep on two
nodes whose worker node dies mid-run ends with every record ok, written by the driver and
equal to a local sweep's.

Each test runs Ray under a temp folder of its own (``RAY_TMPDIR``: no other Ray on the
machine can join it or be joined) and checks that no Ray process of it is left.
Skipped where Ray is not installed.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fedbench.records import read_record_file  # noqa: E402
from fedbench.runners.cli.cli import main  # noqa: E402
from fedbench.runners.executors import ray_executor  # noqa: E402
from fedbench.runners.executors.ray_sweep import GRACE_S  # noqa: E402
from fedbench.runners.outputs.summary import PROCESS_MEASURES  # noqa: E402

from smoke import SMALL_TASK_CONFIGS  # noqa: E402


def _preset(tmp_path: Path, body: str, run: str) -> str:
    task_cfg = ", ".join(f"{k}: {v}" for k, v in SMALL_TASK_CONFIGS["tiny_text"].items())
    p = tmp_path / "p.yaml"
    p.write_text(f"task: tiny_text\n{body}\nrun: {run}\ntask_config: {{{task_cfg}}}\nout: {tmp_path / 'out'}\n")
    return str(p)


def _ray_pids(folder: str) -> list[int]:
    """Processes (not this one) started with ``RAY_TMPDIR=folder``: Ray's of this test."""
    mark = f"RAY_TMPDIR={folder}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if mark in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


@pytest.fixture
def ray_tmp(monkeypatch):
    folder = tempfile.mkdtemp(prefix="fbray", dir="/tmp")  # short: Ray's socket paths have a length limit
    monkeypatch.setenv("RAY_TMPDIR", folder)
    yield folder
    deadline = time.monotonic() + 30
    while _ray_pids(folder) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _ray_pids(folder)
    shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"Ray processes left behind: {left}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_files_come_back_under_the_records_directory_only(tmp_path):
    from fedbench.runners.executors.ray_files import Mirror, read_checkpoint, remove_paths, write_files

    write_files(tmp_path, {"t/m/r.clients/0.pt": b"c0", "t/m/r.ckpt": b"ck"})
    assert read_checkpoint(tmp_path, "t/m/r.ckpt", "t/m/r.clients") == {"t/m/r.clients/0.pt": b"c0",
                                                                         "t/m/r.ckpt": b"ck"}
    assert read_checkpoint(tmp_path, "t/m/other.ckpt", "t/m/other.clients") == {}
    for bad in ("../escape", "/abs/path", ""):
        with pytest.raises(ValueError):
            write_files(tmp_path / "t", {bad: b"x"})
    mirror = Mirror(tmp_path)
    mirror.mark(["t/m/r.ckpt"])
    assert mirror.changed([tmp_path / "t/m/r.clients", tmp_path / "t/m/r.ckpt"]) == {"t/m/r.clients/0.pt": b"c0"}
    time.sleep(0.01)
    write_files(tmp_path, {"t/m/r.ckpt": b"ck2"})
    assert mirror.stale(tmp_path / "t/m/r.ckpt") and not mirror.stale(tmp_path / "t/m/r.clients/0.pt")
    remove_paths(tmp_path, ["t/m/r.ckpt", "t/m/r.clients", "t/m/never.ckpt"])
    assert sorted(p.name for p in (tmp_path / "t/m").iterdir()) == []


def test_a_record_that_does_not_read_back_is_never_reported_ok(tmp_path, monkeypatch, capsys):
    """The driver reads every record back before its line; one it cannot read is FAILED."""
    from fedbench import records
    from fedbench.runners.core.spec import build_spec
    from fedbench.runners.executors.ray_sweep import Driver, Flight, record_from_checkpoint

    spec = build_spec("fedavg", "tiny_text", {"rounds": 1, "clients": 2, "out": str(tmp_path)}, {},
                      SMALL_TASK_CONFIGS["tiny_text"])
    rec = record_from_checkpoint(spec, "ok", None)
    rec["env"].update(host="h", ray_node="n" * 56)
    driver = Driver(ray, None, {}, None, 1.0, 1, 2)
    result = {"record": rec, "files": {"tiny_text/logs/x.txt": b"log"}, "gone": []}
    assert driver.land(Flight("[1/1] fedavg", "x", spec), result, None, None) == "ok"
    assert (tmp_path / "tiny_text/logs/x.txt").read_bytes() == b"log"
    assert "[1/1] fedavg [h, node nnnnnnnn]: fedavg on tiny_text" in capsys.readouterr().out
    real = records.atomic_write_text
    monkeypatch.setattr(records, "atomic_write_text", lambda path, text: real(path, text[: len(text) // 2]))
    assert driver.land(Flight("[1/1] fedavg", "x", spec), result, None, None) == "failed"
    line = capsys.readouterr().out
    assert line.startswith("[1/1] fedavg: FAILED: its record could not be written and read back here") and " ok" not in line
    assert driver.failed == 1


def test_refused_address_is_one_line_and_exit_2(tmp_path, capsys):
    preset = _preset(tmp_path, "methods: [fedavg]", "{rounds: 1, clients: 2}")
    t0 = time.monotonic()
    assert main(["sweep", preset, "--address", f"127.0.0.1:{_free_port()}", "--no-progress"]) == 2
    assert time.monotonic() - t0 < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedbench: error: cannot join the Ray cluster at 127.0.0.1:")
    assert "connection refused" in err and not ray.is_initialized()


def test_silent_address_gives_up_within_the_timeout(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ray_executor, "CONNECT_TIMEOUT_S", 2.0)
    preset = _preset(tmp_path, "methods: [fedavg]", "{rounds: 1, clients: 2}")
    with socket.socket() as server:  # accepts connections, never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        t0 = time.monotonic()
        assert main(["sweep", preset, "--address", f"127.0.0.1:{server.getsockname()[1]}", "--no-progress"]) == 2
        assert time.monotonic() - t0 < 2.0 + 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no answer within 2 s" in err and not ray.is_initialized()


@pytest.mark.slow  # a fault drill: a sweep in a subprocess with its own Ray instance (CI runs the slow checks)
def test_sigterm_records_every_run_in_flight_cancelled_when_sigint_is_ignored(tmp_path, ray_tmp):
    """``nohup fedbench sweep ... --workers 2 &`` then SIGTERM: the runs inherited SIGINT
    ignored, through which Ray's cancel interrupts a task; each still stops within the grace
    period and its own ``cancelled`` record (with the rounds it did) lands in --out. Each
    run's Ray task is named after it."""
    preset = _preset(tmp_path, "methods: [fedavg, fedra]", "{rounds: 300, clients: 2}")
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FEDBENCH_SCRATCH": str(tmp_path / "scratch")}
    proc = subprocess.Popen([sys.executable, "-m", "fedbench", "sweep", preset, "--workers", "2", "--no-progress"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 300
        while len(list(out.rglob("*.ckpt"))) < 2:  # both runs train (their first checkpoints are here)
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=60)
            time.sleep(0.2)
        titles = [(Path("/proc", str(pid), "cmdline").read_bytes().decode(errors="replace"))
                  for pid in _ray_pids(ray_tmp)]
        for run_id in {p.stem for p in out.rglob("*.ckpt")}:  # Ray titles a task's process after its name
            assert any(t.startswith("ray::") and f"({run_id})" in t for t in titles), titles
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=GRACE_S + 60)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    recs = [read_record_file(p) for p in out.rglob("*.json")]
    assert len(recs) == 2 and {r["run"]["method"] for r in recs} == {"fedavg", "fedra"}
    for r in recs:  # each run's own record (not one made by the driver after killing it)
        assert r["status"] == "cancelled" and r["error"] == "sweep cancelled (SIGTERM)", r["error"]
        assert 1 <= r["run"]["rounds_completed"] < 300 and r["env"]["host"] == socket.gethostname()
    assert stdout.count("CANCELLED after") == 2 and "2 runs in flight stopped" in stderr
    assert stopped_in < GRACE_S + 30  # the grace period, then Ray's shutdown


def _comparable(rec):
    cost = {k: v for k, v in rec["cost"].items() if k not in PROCESS_MEASURES}
    return rec["results"], cost, rec["run"]["sampled_clients"], rec["run"]["run_id"]


@pytest.mark.slow
def test_two_node_sweep_loses_the_worker_node_and_nothing_else(tmp_path, ray_tmp, monkeypatch):
    """Two raylets on loopback, the worker's scratch folder private to it, the worker node
    killed once a run on it has sent a checkpoint: that run starts again on the head from
    the checkpoint, and every record is ok, in the driver's --out, equal to a local sweep's."""
    from ray.cluster_utils import Cluster

    head_scratch, worker_scratch = tmp_path / "head-scratch", tmp_path / "worker-scratch"
    monkeypatch.setenv("FEDBENCH_SCRATCH", str(head_scratch))  # the head node's processes inherit it
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    preset = _preset(tmp_path, "methods: [fedavg, fedra]\nseeds: [0, 1]", "{rounds: 3, clients: 2}")
    out = tmp_path / "out"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    killed: dict = {}
    try:
        worker = cluster.add_node(num_cpus=1, env_vars={"FEDBENCH_SCRATCH": str(worker_scratch)})

        def kill_the_worker_node_mid_run():
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                on_worker = {p.stem for p in worker_scratch.rglob("*.ckpt")}
                both = on_worker & {p.stem for p in out.rglob("*.ckpt")}  # a checkpoint the driver holds
                if both:
                    killed.update(run_id=sorted(both)[0], node=worker.node_id)
                    cluster.remove_node(worker, allow_graceful=False)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_the_worker_node_mid_run, daemon=True)
        killer.start()
        code = main(["sweep", preset, "--address", cluster.address, "--workers", "2", "--no-progress"])
        killer.join(timeout=10)
    finally:
        cluster.shutdown()
    assert code == 0 and killed
    paths = sorted(out.rglob("*.json"))
    remote = {r["run"]["run_id"]: r for r in map(read_record_file, paths)}
    assert len(paths) == 4 and {r["status"] for r in remote.values()} == {"ok"}
    assert not list(out.rglob("*.ckpt")) and not list(out.rglob("*.clients"))  # gone once ok, as locally
    hit = remote[killed["run_id"]]
    assert [a["ray_node"] for a in hit["env"]["retries"]] == [killed["node"]]
    assert hit["env"]["retries"][0]["checkpoint_round"] >= 1
    assert hit["run"]["resume"]["from_round"] == hit["env"]["retries"][0]["checkpoint_round"]
    assert hit["env"]["ray_node"] != killed["node"]
    assert all(r["env"]["retries"] == [] for k, r in remote.items() if k != killed["run_id"])
    assert main(["sweep", preset, "--out", str(tmp_path / "local"), "--no-progress"]) == 0
    local = {r["run"]["run_id"]: r for r in map(read_record_file, (tmp_path / "local").rglob("*.json"))}
    assert sorted(local) == sorted(remote)
    for run_id, rec in local.items():
        assert _comparable(remote[run_id]) == _comparable(rec)
    print(json.dumps({"killed": killed, "from_round": hit["run"]["resume"]["from_round"]}))
