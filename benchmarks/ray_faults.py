"""What a Ray sweep loses when a node or the driver dies, measured in one invocation.

Two raylets on loopback (``ray.cluster_utils.Cluster``: a head and a worker node, 1 CPU
each, each with its own scratch folder), a tiny sweep (tiny_text, fedavg and fedra x 2
seeds, ``--rounds`` rounds, checkpoint every round), ``--workers 2``:

1. Node loss: the worker node is killed (SIGKILL of its raylet and workers) once a run on it
   has sent a checkpoint. Printed: the seconds from the kill to the run's start on the
   other node, the round it went on from, the rounds lost, and whether every record is ok
   and equal to a local sweep's but for time.
2. Driver loss: the sweep runs in a child process, killed (SIGKILL) once both runs in
   flight have sent a checkpoint. Printed: the seconds until no task of it runs on the
   cluster, then a re-run of the sweep: the rounds each unfinished run went on from.
3. Driver loss with a local Ray instance (``--workers 2``, no ``--address``): the Ray
   processes of the killed driver left after 30 s.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/ray_faults.py [--rounds 4]

Other processes on the machine skew the seconds: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SMALL = {"n_train": 160, "n_test": 48}  # tests/smoke.py SMALL_TASK_CONFIGS["tiny_text"]


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def preset(dir_: Path, rounds: int) -> str:
    p = dir_ / "preset.yaml"
    task_cfg = ", ".join(f"{k}: {v}" for k, v in SMALL.items())
    p.write_text(f"task: tiny_text\nmethods: [fedavg, fedra]\nseeds: [0, 1]\nrun: {{rounds: {rounds}, clients: 2}}\n"
                 f"task_config: {{{task_cfg}}}\nout: {dir_ / 'out'}\n")
    return str(p)


def ray_pids(folder: str, names: tuple[str, ...] = ("",)) -> list[int]:
    """Processes started with ``RAY_TMPDIR=folder`` (Ray's of this script) whose command line
    holds one of ``names`` (a run id: Ray titles a task's process after the task's name)."""
    mark = f"RAY_TMPDIR={folder}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if mark in (d / "environ").read_bytes().split(b"\0") and \
                        any(n in (d / "cmdline").read_bytes().decode(errors="replace") for n in names):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


class Stamped(io.TextIOBase):
    """stdout with the time each line was written."""

    def __init__(self):
        self.lines: list[tuple[float, str]] = []

    def write(self, s: str) -> int:
        for line in s.splitlines():
            if line.strip():
                self.lines.append((time.monotonic(), line))
        return len(s)


def records(out: Path) -> dict:
    from fedbench.records import read_record_file

    return {r["run"]["run_id"]: r for r in map(read_record_file, out.rglob("*.json"))}


def same_but_time(a: dict, b: dict) -> bool:
    from fedbench.runners.outputs.summary import PROCESS_MEASURES

    def part(r):
        return r["results"], {k: v for k, v in r["cost"].items() if k not in PROCESS_MEASURES}, r["run"]["sampled_clients"]
    return sorted(a) == sorted(b) and all(part(a[k]) == part(b[k]) for k in a)


def wait_for(cond, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return False


def cluster(work: Path):
    from ray.cluster_utils import Cluster

    os.environ["FEDBENCH_SCRATCH"] = str(work / "head-scratch")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = c.add_node(num_cpus=1, env_vars={"FEDBENCH_SCRATCH": str(work / "worker-scratch")})
    return c, worker


def node_loss(work: Path, rounds: int) -> None:
    from fedbench.runners.cli.cli import main

    p, out = preset(work, rounds), work / "out"
    c, worker = cluster(work)
    kill: dict = {}

    def killer():
        def ready():
            both = {q.stem for q in (work / "worker-scratch").rglob("*.ckpt")} & {q.stem for q in out.rglob("*.ckpt")}
            kill["run_id"] = sorted(both)[0] if both else None
            return bool(both)
        if wait_for(ready, 600):
            kill["t"] = time.monotonic()
            c.remove_node(worker, allow_graceful=False)

    t = threading.Thread(target=killer, daemon=True)
    stamped = Stamped()
    try:
        t.start()
        t0 = time.monotonic()
        with redirect_stdout(stamped):
            code = main(["sweep", p, "--address", c.address, "--workers", "2", "--no-progress"])
        wall = time.monotonic() - t0
        t.join(5)
    finally:
        c.shutdown()
    remote = records(out)
    lost = [(ts, line) for ts, line in stamped.lines if "lost (" in line]
    print(f"(1) node loss: exit {code}, {wall:.1f} s wall; " + (f"worker node killed, its run {kill['run_id']} "
          f"started again {lost[0][0] - kill['t']:.1f} s later" if lost and "t" in kill else "no kill"))
    if lost:
        print(f"    {lost[0][1]}")
    hit = remote.get(kill.get("run_id"))
    if hit:
        r = hit["env"]["retries"][0]
        print(f"    went on from round {hit['run']['resume']['from_round']} (checkpoint round {r['checkpoint_round']}) "
              f"of {rounds}; {hit['cost']['seconds_total']:.1f} s in its record, the lost attempt's time up to "
              f"its checkpoint included")
    with redirect_stdout(io.StringIO()):
        main(["sweep", p, "--out", str(work / "local"), "--no-progress"])
    local = records(work / "local")
    print(f"    {sum(r['status'] == 'ok' for r in remote.values())} of {len(local)} records ok in the driver's --out; "
          f"equal to a local sweep's but for time: {same_but_time(remote, local)}")


def driver_loss(work: Path, rounds: int, folder: str) -> None:
    from fedbench.runners.cli.cli import main

    p, out = preset(work, rounds), work / "out"
    c, _ = cluster(work)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "fedbench", "sweep", p, "--address", c.address, "--workers",
                                 "2", "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ok = wait_for(lambda: len(list(out.rglob("*.ckpt"))) >= 2 or proc.poll() is not None, 600, 0.1)
        held = {q.stem for q in out.rglob("*.ckpt")}
        t0 = time.monotonic()
        proc.kill()
        proc.wait()
        running = ray_pids(folder, tuple(held))
        gone = wait_for(lambda: not ray_pids(folder, tuple(held)), 120, 0.2)
        print(f"(2) driver loss (--address): driver killed with {len(held) if ok else 0} runs in flight "
              f"({len(running)} task processes); "
              + (f"no task of it running {time.monotonic() - t0:.1f} s later" if gone else "its tasks still run after 120 s"))
        t1 = time.monotonic()
        with redirect_stdout(io.StringIO()):
            code = main(["sweep", p, "--address", c.address, "--workers", "2", "--no-progress"])
        recs = records(out)
        went_on = {k[:8]: recs[k]["run"]["resume"] and recs[k]["run"]["resume"]["from_round"] for k in held if k in recs}
        print(f"    re-run: exit {code}, {time.monotonic() - t1:.1f} s, {sum(r['status'] == 'ok' for r in recs.values())} "
              f"of {len(recs)} ok; the runs in flight went on from rounds {went_on}")
    finally:
        c.shutdown()


def local_driver_loss(work: Path, rounds: int, folder: str) -> None:
    p, out = preset(work, rounds), work / "out"
    proc = subprocess.Popen([sys.executable, "-m", "fedbench", "sweep", p, "--workers", "2", "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: len(list(out.rglob("*.ckpt"))) >= 2 or proc.poll() is not None, 600, 0.1)
    proc.kill()
    proc.wait()
    time.sleep(30)
    left = ray_pids(folder)
    names = sorted({Path("/proc", str(q), "comm").read_text().strip() for q in left if Path("/proc", str(q)).exists()})
    print(f"(3) driver loss (local Ray instance): {len(left)} Ray processes left 30 s after the kill {names}")
    for q in left:  # this script's own Ray processes (RAY_TMPDIR is this script's folder)
        try:
            os.kill(q, signal.SIGKILL)
        except OSError:
            pass


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="fbray", dir="/tmp")  # Ray's sockets: a short path
    os.environ["RAY_TMPDIR"] = folder
    print(load())
    try:
        for i, fn in enumerate((node_loss, driver_loss, local_driver_loss)):
            work = Path(tempfile.mkdtemp(prefix=f"fbfault{i}"))
            try:
                fn(work, args.rounds) if fn is node_loss else fn(work, args.rounds, folder)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(load())


if __name__ == "__main__":
    main()
