"""The cases of ``benchmarks/adversary.py``: the fixtures they share (made once in the temp
folder) and one :class:`Case` per attempt, grouped by the cause classes of issue 39
(1 outputs damaged, 2 unbounded or blocking reads, 3 hangs on huge numbers or YAML, 4 plan
inputs, 5 a broken feature, 6 failures after set-up, 7 plugins and callbacks, 8 claim files,
9 tampered records, 10 silent acceptances) and ``new`` ones beside them.

Every path is relative to the temp folder (the commands run there). A case expects exit 2
and one clean line unless it names another status and where that behaviour is documented.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

#: a tiny run's fields (tiny_text, 2 clients, 1 round of 1 step, 80 training texts)
TINY = ["--task", "tiny_text", "--rounds", "1", "--clients", "2", "--per-round", "2", "--max-steps", "1",
        "--set", "task.n_train=80", "--set", "task.n_test=40", "--no-progress"]
RUN = ["run", "--method", "fedavg", *TINY]
PLAN = ["plan", "--methods", "fedavg", "--model", "minilm-l6"]
CLAIMS = ["claims", "fedra", "--claims", "claims_real", "--records", "base"]


@dataclass(frozen=True)
class Case:
    name: str
    cls: str  # the cause class (1-10) or "new"
    argv: list[str]  # fedbench's arguments
    expect: int = 2
    writes: tuple[str, ...] = ()  # paths the command may create or change (prefixes)
    doc: str = ""  # where a behaviour other than a clean refusal is documented
    stderr: str = ""  # a regular expression stderr must match
    env: dict | None = None
    check: Callable[[Path], str | None] | None = None  # an extra check after the run: the problem, or None
    signal_after: str = ""  # send SIGTERM once this path exists (a run interrupted mid-way)


def _write(root: Path, rel: str, text: str | bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(text if isinstance(text, bytes) else text.encode())


def _yaml(d) -> str:
    return json.dumps(d)  # JSON is YAML


def _records(root: Path, folder: str) -> list[Path]:
    return sorted((root / folder).rglob("*.json"))


def make_fixtures(root: Path, run_fedbench: Callable[[list[str]], int]) -> dict[str, bool]:
    """The shared files; two finished tiny records under ``base/`` (a sweep of seeds 0 and 1)
    and copies of them to tamper with. Returns which optional fixtures could be made."""
    have = {}
    _write(root, "outside/victim.md", "not fedbench's\n")
    shutil.copytree(Path(__file__).resolve().parents[1] / "leaderboard" / "claims", root / "claims_real")
    os.mkfifo(root / "fifo")
    os.mkfifo(root / "claims_fifo_dir.tmp")  # moved into a folder below
    try:  # a copy of /dev/full (char 1,7) that a regression could only damage here
        os.mknod(root / "devfull", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        have["devnode"] = True
    except OSError:
        have["devnode"] = False
    _write(root, "base.yaml", _yaml({"task": "tiny_text", "methods": ["fedavg"], "seeds": [0, 1], "out": "base",
                                     "run": {"rounds": 1, "clients": 2, "per_round": 2, "max_steps": 1},
                                     "task_config": {"n_train": 80, "n_test": 40}}))
    rc = run_fedbench(["sweep", "base.yaml", "--no-progress"])
    recs = _records(root, "base")
    if rc != 0 or len(recs) != 2:
        raise SystemExit(f"adversary: the base sweep failed (exit {rc}, {len(recs)} records)")
    for name in ("edited", "copied", "deep", "huge", "fifo_rec", "link_rec"):
        shutil.copytree(root / "base", root / f"rec_{name}")
    edited = _records(root, "rec_edited")[0]
    edited.write_text(edited.read_text().replace('"final": ', '"final": 0.999, "was": ', 1))
    a, b = _records(root, "rec_copied")
    shutil.copyfile(a, b)  # seed 0's record under seed 1's file name
    _write(root, "rec_deep/tiny_text/fedavg/deep.json", "[" * 100_000 + "]" * 100_000)
    with open(root / "rec_huge/tiny_text/fedavg/huge.json", "wb") as f:
        f.truncate(2 * 1024**3)  # sparse: 2 GB of NULs, no disk used
    os.mkfifo(root / "rec_fifo_rec/tiny_text/fedavg/pipe.json")
    os.symlink(root / "outside/victim.md", root / "rec_link_rec/tiny_text/fedavg/link.json")
    moved = _records(root, "base")[0]
    _write(root, f"rec_moved/tiny_vision/fedavg/{moved.name}", moved.read_bytes())  # under another task's folder
    # data folders: a 2 GB training file, a FIFO and a device where the records go
    _write(root, "dolly_big/test.jsonl", json.dumps({"instruction": "a", "context": "", "response": "b",
                                                     "category": "open_qa"}) + "\n")
    with open(root / "dolly_big/train.jsonl", "wb") as f:
        f.truncate(2 * 1024**3)
    (root / "dolly_fifo").mkdir()
    os.mkfifo(root / "dolly_fifo/databricks-dolly-15k.jsonl")
    (root / "ledgar_dev").mkdir()
    os.symlink("/dev/zero", root / "ledgar_dev/train.jsonl")
    _write(root, "list.yaml", "- run\n- method\n")
    try:  # a 64 KB file system, full after the first checkpoint (needs mount rights: root)
        (root / "smallfs").mkdir()
        import subprocess

        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(root / "smallfs")], check=True,
                       capture_output=True)
        have["smallfs"] = True
    except (OSError, subprocess.CalledProcessError):
        have["smallfs"] = False
    # outputs: symlinks out, a too-long name, folders where files go
    (root / "reports").mkdir()
    os.symlink("../outside/victim.md", root / "reports/report_link.md")
    (root / "lb_link").mkdir()
    os.symlink("../outside/victim.md", root / "lb_link/tiny_text.md")
    (root / "run_link").mkdir()
    os.symlink("../outside", root / "run_link/tiny_text")
    _write(root, "plain_file", "a file, not a folder\n")
    (root / "a_folder").mkdir()
    # inputs
    with open(root / "sparse.yaml", "wb") as f:
        f.truncate(2 * 1024**3)
    _write(root, "latin1.yaml", b"run: {lr: 0.01}\n# caf\xe9\n")
    aliases = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]\n"
        for i in range(1, 72))
    _write(root, "aliases.yaml", aliases)
    _write(root, "deep.yaml", "run: " + "[" * 100_000 + "]" * 100_000 + "\n")
    _write(root, "big_preset.yaml", _yaml({"task": "tiny_text", "methods": ["fedavg", "fedra", "hetlora", "flexlora"],
                                           "settings": ["iid", "dir(0.5)"],
                                           "resources": [{"roc": "6:3:1"}, {"roc": "1:1:1"}],
                                           "seeds": list(range(2500)), "run": {"rounds": 1}}))
    _write(root, "dup_preset.yaml", _yaml({"task": "tiny_text", "methods": ["fedavg"], "seeds": [0, 0]}))
    _write(root, "badkey_preset.yaml", _yaml({"task": "tiny_text", "methods": ["fedavg"], "sedes": [0]}))
    _write(root, "tampered.yaml", _yaml({"task": "tiny_text", "methods": ["fedavg"], "seeds": [0, 1],
                                         "out": "rec_edited",
                                         "run": {"rounds": 1, "clients": 2, "per_round": 2, "max_steps": 1},
                                         "task_config": {"n_train": 80, "n_test": 40}}))
    mc = {"model_type": "bert", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
          "intermediate_size": 512, "vocab_size": 1000}
    for name, change in (("layers0", {"num_hidden_layers": 0}), ("width_str", {"hidden_size": "abc"}),
                         ("heads", {"num_attention_heads": 3}), ("heads0", {"num_attention_heads": 0})):
        _write(root, f"mc_{name}.json", json.dumps({**mc, **change}))
    _write(root, "mc_nan.json", json.dumps(mc).replace('"hidden_size": 256', '"hidden_size": NaN'))
    _write(root, "mc_deep.json", '{"model_type": "bert", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _write(root, "mc_vit.json", json.dumps({"model_type": "vit", "num_hidden_layers": 2, "hidden_size": 64,
                                            "num_attention_heads": 2, "intermediate_size": 128, "image_size": -32}))
    _write(root, "cat_huge.yaml", _yaml({"phone": {"memory_gb": 1e300, "tflops": {"fp32": 1.0},
                                                   "uplink_mbps": 1, "downlink_mbps": 1, "source": "x"}}))
    _write(root, "cat_nobf16.yaml", _yaml({"oldphone": {"memory_gb": 4, "tflops": {"fp32": 1.0},
                                                        "uplink_mbps": 1, "downlink_mbps": 1, "source": "x"}}))
    # claim files, one folder each (a claims folder is read whole)
    head = "paper: x\ntitle: t\nblocks:\n  - table: t\n    task: tiny_text\n    method: fedavg\n    columns: {iid: x}\n"
    claims = {"list": "- a\n- b\n", "blocks5": "paper: x\ntitle: t\nblocks: 5\n", "empty": "",
              "nullgroups": f"{head}    groups: null\n",
              "syntax": "paper: x\ntitle: [unclosed\n",
              "command": f"{head}    command: fedbench sweep x.yaml --only seed={{seed_list}}\n"
                         "    groups:\n      - roc: '6:3:1'\n        figures: {fedavg: [1.0]}\n"}
    for name, text in claims.items():
        _write(root, f"claims_{name}/x.yaml", text)
    (root / "claims_fifo").mkdir()
    os.replace(root / "claims_fifo_dir.tmp", root / "claims_fifo/x.yaml")
    # plugins: an installed distribution (a .dist-info on PYTHONPATH) with three bad entry points
    _write(root, "plug/advplug-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: advplug\nVersion: 0.1\n")
    _write(root, "plug/advplug-0.1.dist-info/entry_points.txt",
           "[fedbench.methods]\nadv_exits = adv_exit:X\nadv_odd = adv_ok:NotAMethod\nfedavg = adv_ok:Good\n")
    _write(root, "plug/adv_exit.py", "import sys\nsys.exit(3)\n")
    _write(root, "plug/adv_ok.py", "from fedbench.methods.baselines import FedAvg\n\n\nclass Good(FedAvg):\n"
                                   "    '''a plugin method'''\n\n\nclass NotAMethod:\n    '''not a Method'''\n")
    # callbacks
    _write(root, "cb/adv_cb.py", "import sys\nfrom fedbench.runners.outputs.callbacks import Callback\n\n\n"
                                 "class InitRaises(Callback):\n    def __init__(self):\n"
                                 "        raise RuntimeError('callback init broke')\n\n\n"
                                 "class EndRaises(Callback):\n    def on_run_end(self, record):\n"
                                 "        raise RuntimeError('callback end broke')\n\n\nclass Plain:\n    pass\n")
    _write(root, "cb/adv_cb_exit.py", "import sys\nsys.exit(0)\n")
    return have


def _still(kind: str, rel: str) -> Callable[[Path], str | None]:
    test = {"fifo": stat.S_ISFIFO, "chr": stat.S_ISCHR}[kind]
    return lambda root: None if test(os.lstat(root / rel).st_mode) else f"{rel} is no longer a {kind}"


def _record_status(folder: str, status: str, n: int = 1) -> Callable[[Path], str | None]:
    def check(root: Path) -> str | None:
        recs = [json.loads(p.read_text()) for p in _records(root, folder)]
        got = [r.get("status") for r in recs]
        return None if got == [status] * n else f"records under {folder}: {got}, want {[status] * n}"
    return check


def _saved_model(root: Path) -> str | None:
    ok = _record_status("c_save", "ok")(root)
    saved = [p for p in (root / "c_save").rglob("*") if p.suffix != ".json" and p.is_file()]
    return ok or (None if saved else "no model saved beside the record")


def cases(have: dict[str, bool]) -> list[Case]:
    """Every case, in table order."""
    long_name, long_path = "n" * 300, "/".join(["d" * 200] * 22)
    cb = {"PYTHONPATH": "cb"}
    plug = {"PYTHONPATH": "plug"}
    out = [
        # 1: outputs that are not ours: devices, FIFOs, symlinks out, folders, long names
        Case("claims --out a new file (the control)", "1", [*CLAIMS, "--out", "c_claims/report.md"], expect=0,
             writes=("c_claims",), check=lambda root: None if (root / "c_claims/report.md").is_file() else "no report",
             doc="the report is written where asked"),
        Case("claims --out a FIFO", "1", [*CLAIMS, "--out", "fifo"], check=_still("fifo", "fifo")),
        Case("claims --out a symlink out of its folder", "1", [*CLAIMS, "--out", "reports/report_link.md"]),
        Case("claims --out a folder", "1", [*CLAIMS, "--out", "a_folder"]),
        Case("leaderboard: its <task>.md a symlink out", "1", ["leaderboard", "--records", "base", "--out", "lb_link"]),
        Case("leaderboard --out a regular file", "1", ["leaderboard", "--records", "base", "--out", "plain_file"]),
        Case("leaderboard --out a FIFO", "1", ["leaderboard", "--records", "base", "--out", "fifo"], check=_still("fifo", "fifo")),
        Case("export --out inside the records folder", "1", ["export", "--records", "base", "--out", "base/x"]),
        Case("export --out a FIFO", "1", ["export", "--records", "base", "--out", "fifo"], check=_still("fifo", "fifo")),
        Case("run --out a regular file", "1", [*RUN, "--out", "plain_file"]),
        Case("run --out a 300-byte name", "1", [*RUN, "--out", long_name]),
        Case("run --out a 4400-byte path", "1", [*RUN, "--out", long_path]),
        Case("run: the record's folder a symlink out", "1", [*RUN, "--out", "run_link"]),
        Case("sweep --out a FIFO", "1", ["sweep", "base.yaml", "--out", "fifo"], check=_still("fifo", "fifo")),
        Case("export --out a folder path through a file", "1", ["export", "--records", "base", "--out", "plain_file/x"]),
    ]
    if have.get("devnode"):
        out += [Case("claims --out a device (copy of /dev/full)", "1", [*CLAIMS, "--out",
                                                                         "devfull"], check=_still("chr", "devfull")),
                Case("export --out a device", "1", ["export", "--records", "base", "--out", "devfull"],
                     check=_still("chr", "devfull"))]
    out += [
        # 2: reads bounded and never blocking
        Case("run --config /dev/zero", "2", [*RUN, "--config", "/dev/zero"]),
        Case("run --config a FIFO", "2", [*RUN, "--config", "fifo"]),
        Case("run --config a folder", "2", [*RUN, "--config", "a_folder"]),
        Case("run --config a 2 GB file", "2", [*RUN, "--config", "sparse.yaml"]),
        Case("run --config not UTF-8", "2", [*RUN, "--config", "latin1.yaml"]),
        Case("run --config missing", "2", [*RUN, "--config", "no_such.yaml"]),
        Case("sweep /dev/zero", "2", ["sweep", "/dev/zero", "--dry-run"]),
        Case("sweep a FIFO", "2", ["sweep", "fifo", "--dry-run"]),
        Case("plan --device-catalog /dev/zero", "2", [*PLAN, "--device-catalog", "/dev/zero"]),
        Case("plan --device-catalog a FIFO", "2", [*PLAN, "--device-catalog", "fifo"]),
        Case("plan --model-config /dev/urandom", "2", ["plan", "--methods", "fedavg", "--model-config", "/dev/urandom"]),
        Case("claims: a claim file that is a FIFO", "2", ["claims", "--all", "--claims", "claims_fifo", "--records", "base"]),
        Case("run --data-dir /dev/zero (ledgar)", "2", ["run", "--method", "fedavg", "--task", "ledgar",
                                                        "--data-dir", "/dev/zero", "--no-progress", "--out", "c_r"]),
        Case("run --config a 2 GB file as --device-catalog", "2", [*RUN, "--devices", "phone:1", "--device-catalog",
                                                                   "sparse.yaml"]),
        # 3: hangs: huge numbers, aliased or deep YAML, a big sweep
        Case("run --roc 1e999999999:1:1", "3", [*RUN, "--roc", "1e999999999:1:1"]),
        Case("run --devices phone:1e999999999", "3", [*RUN, "--devices", "phone:1e999999999,laptop:1"]),
        Case("run --tier-fractions 1e999999999", "3", [*RUN, "--roc", "1:1:1", "--tier-fractions", "1e999999999,0.5,0.25"]),
        Case("run --setting with a 5000-digit k", "3", [*RUN, "--setting", "9" * 5000 + "/1.0"]),
        Case("run --setting dir(1e99999999)", "3", [*RUN, "--setting", "dir(1e99999999)"]),
        Case("run --lr 1e999 (inf)", "3", [*RUN, "--lr", "1e999"]),
        Case("run --lr nan", "3", [*RUN, "--lr", "nan"]),
        Case("run --rounds 10**30", "3", [*RUN, "--rounds", "1" + "0" * 30]),
        Case("run --config: 72 nested aliases", "3", [*RUN, "--config", "aliases.yaml"]),
        Case("run --config: 100 000-deep YAML", "3", [*RUN, "--config", "deep.yaml"]),
        Case("run --set a 50 000-deep value", "3", [*RUN, "--set", "method.lora_r=" + "[" * 50_000 + "]" * 50_000]),
        Case("run --capacities with 40 000 entries", "3", [*RUN, "--capacities", ",".join(["12"] * 40_000)]),
        Case("sweep --dry-run of a 40 000-run grid", "3", ["sweep", "big_preset.yaml", "--dry-run", "--out", "c_big"],
             expect=0, stderr="40000 runs checked", doc="docs/tutorial/reproduce.md: past 500 runs, the first 500 "
             "and a count; each configuration validated once"),
        # 4: plan inputs
        Case("plan --batch-size 10**20", "4", [*PLAN, "--batch-size", "1" + "0" * 20]),
        Case("plan --n-classes 10**20", "4", [*PLAN, "--n-classes", "1" + "0" * 20]),
        Case("plan --seq-len 10**9", "4", [*PLAN, "--seq-len", "1000000000"]),
        Case("plan --steps 0", "4", [*PLAN, "--steps", "0"]),
        Case("plan --lora-r -1", "4", [*PLAN, "--lora-r", "-1"]),
        Case("plan --devices ' , '", "4", [*PLAN, "--devices", " , "]),
        Case("plan --methods nosuch", "4", ["plan", "--methods", "nosuch"]),
        Case("plan --model-config with 0 layers", "4", ["plan", "--methods", "fedavg", "--model-config", "mc_layers0.json"]),
        Case("plan --model-config with a string width", "4", ["plan", "--methods", "fedavg", "--model-config", "mc_width_str.json"]),
        Case("plan --model-config with a NaN width", "4", ["plan", "--methods", "fedavg", "--model-config", "mc_nan.json"]),
        Case("plan --model-config: heads do not divide width", "4", ["plan", "--methods", "fedavg", "--model-config", "mc_heads.json"]),
        Case("plan --model-config with 0 heads", "4", ["plan", "--methods", "fedavg", "--model-config", "mc_heads0.json"]),
        Case("plan --model-config 100 000 deep", "4", ["plan", "--methods", "fedavg", "--model-config", "mc_deep.json"]),
        Case("plan --model-config: negative image size", "4", ["plan", "--methods", "fedavg", "--model-config", "mc_vit.json"]),
        Case("plan: a catalogue memory_gb 1e300", "4", [*PLAN, "--devices", "phone", "--device-catalog", "cat_huge.yaml"]),
        # 5: --save-model of a method whose adapter once failed to save
        Case("run fedsa_lora --save-model", "5", ["run", "--method", "fedsa_lora", *TINY, "--save-model", "--out", "c_save"],
             expect=0, writes=("c_save",), check=_saved_model, doc="README: --save-model for every method"),
        # 6: failures after set-up
        Case("--callback whose on_run_end raises", "6", [*RUN, "--callback", "adv_cb:EndRaises", "--out", "c_cbend"],
             expect=1, writes=("c_cbend", "_tmp"), env=cb, stderr=r"callback end broke.*traceback",
             check=_record_status("c_cbend", "ok"), doc="docs/guide/running.md: exit status 1, the record stands"),
        Case("run --log nosuchtracker", "6", [*RUN, "--log", "nosuchtracker", "--out", "c_r"]),
        # 7: plugins and callbacks
        Case("plugins: sys.exit(3), not a Method, named fedavg (list)", "7", ["list"], expect=0, env=plug,
             stderr=r"adv_exits.*could not be loaded.*sys.exit\(3\)", doc="docs/guide/running.md: one warning each"),
        Case("plugins broken, plan of a built-in", "7", [*PLAN, "--devices", "phone"], expect=0, env=plug,
             stderr="named like a built-in", doc="docs/guide/running.md: the rest of the registry works"),
        Case("plugins broken, bad input still one line", "7", [*RUN, "--seed", "-1"], env=plug),
        Case("--callback __init__ raises", "7", [*RUN, "--callback", "adv_cb:InitRaises", "--out", "c_r"], env=cb),
        Case("--callback module calls sys.exit(0)", "7", [*RUN, "--callback", "adv_cb_exit:X", "--out", "c_r"], env=cb),
        Case("--callback not a Callback", "7", [*RUN, "--callback", "adv_cb:Plain", "--out", "c_r"], env=cb),
        Case("--callback without a class", "7", [*RUN, "--callback", "adv_cb", "--out", "c_r"], env=cb),
        Case("--callback module missing", "7", [*RUN, "--callback", "no_such_mod:X", "--out", "c_r"]),
        # 8: claim files of the wrong shape
        *[Case(f"claims: {what}", "8", ["claims", "--all", "--claims", f"claims_{name}", "--records", "base"])
          for name, what in (("list", "a list, not a mapping"), ("blocks5", "blocks: 5"), ("nullgroups", "groups: null"),
                             ("command", "command names an unknown field"), ("empty", "an empty file"),
                             ("syntax", "a YAML syntax error"))],
        Case("claims: an unknown paper", "8", ["claims", "nosuchpaper", "--claims", "claims_real", "--records", "base"]),
        # 9: records tampered with
        Case("leaderboard over a hand-edited record", "9", ["leaderboard", "--records", "rec_edited", "--out", "c_lb1"],
             expect=0, writes=("c_lb1",), stderr="warning", doc="docs/guide/running.md: a mismatch is one warning, "
             "the record is not used"),
        Case("leaderboard over a copied record", "9", ["leaderboard", "--records", "rec_copied", "--out", "c_lb2"],
             expect=0, writes=("c_lb2",), stderr="warning", doc="the same"),
        Case("sweep --dry-run: a hand-edited record is not done", "9", ["sweep", "tampered.yaml", "--dry-run"],
             expect=0, stderr="warning", doc="docs/guide/running.md: --force not needed, the run is redone"),
        Case("leaderboard: a 100 000-deep record", "9", ["leaderboard", "--records", "rec_deep", "--out", "c_lb3"],
             expect=0, writes=("c_lb3",), stderr="warning", doc="a corrupt record is one warning"),
        Case("leaderboard: a 2 GB record", "9", ["leaderboard", "--records", "rec_huge", "--out", "c_lb4"],
             expect=0, writes=("c_lb4",), stderr="warning", doc="a corrupt record is one warning"),
        Case("leaderboard: a record that is a FIFO", "9", ["leaderboard", "--records", "rec_fifo_rec", "--out", "c_lb5"],
             expect=0, writes=("c_lb5",), stderr="warning", doc="a corrupt record is one warning"),
        Case("leaderboard: a record symlinked out", "9", ["leaderboard", "--records", "rec_link_rec", "--out", "c_lb6"],
             expect=0, writes=("c_lb6",), stderr="warning", doc="a corrupt record is one warning"),
        Case("export over a hand-edited record", "9", ["export", "--records", "rec_edited", "--out", "c_ex"],
             expect=0, writes=("c_ex",), stderr="warning", doc="the same as the leaderboard"),
        # 10: silent acceptances
        Case("run --device-catalog without --devices", "10", [*RUN, "--device-catalog", "cat_nobf16.yaml"]),
        Case("run bf16 on a device with no bf16 figure", "10", [*RUN, "--devices", "oldphone:1", "--device-catalog",
                                                                "cat_nobf16.yaml", "--precision", "bf16"]),
        Case("run --workers with --executor packed", "10", [*RUN, "--executor", "packed", "--workers", "2"]),
        Case("run --deadline without --devices", "10", [*RUN, "--deadline", "5"]),
        # new
        Case("dolly: a 2 GB training file", "new", ["run", "--method", "fedavg", "--task", "dolly", "--model", "tiny-llama",
                                                     "--data-dir", "dolly_big", "--no-progress", "--out", "c_r"],
             writes=("c_r",)),
        Case("dolly: the data file is a FIFO", "new", ["run", "--method", "fedavg", "--task", "dolly", "--model",
                                                        "tiny-llama", "--data-dir", "dolly_fifo", "--no-progress",
                                                        "--out", "c_r"]),
        Case("ledgar: train.jsonl a link to /dev/zero", "new", ["run", "--method", "fedavg", "--task", "ledgar",
                                                                 "--data-dir", "ledgar_dev", "--no-progress", "--out", "c_r"],
             writes=("c_r",)),
        Case("leaderboard --records /dev/zero", "new", ["leaderboard", "--records", "/dev/zero", "--out", "c_lb7"]),
        Case("export --records a FIFO", "new", ["export", "--records", "fifo", "--out", "c_ex2"]),
        Case("leaderboard: a record under another task's folder", "new", ["leaderboard", "--records", "rec_moved",
                                                                           "--out", "c_lb8"],
             expect=0, writes=("c_lb8",), doc="docs/guide/running.md: a record is read by its content wherever it "
             "lies; a second copy of a run is one warning"),
        Case("run --config: a YAML list", "new", [*RUN, "--config", "list.yaml"]),
        Case("run --set task.seq_len=1e999", "new", [*RUN, "--set", "task.seq_len=1e999"]),
        Case("run --roc 6:3:1 --tier-ranks 1,2", "new", [*RUN, "--roc", "6:3:1", "--tier-ranks", "1,2"]),
        Case("plan --model nosuch", "new", ["plan", "--methods", "fedavg", "--model", "nosuch"]),
        Case("plan --lora-targets nosuch", "new", [*PLAN, "--lora-targets", "nosuch"]),
        Case("plan bf16 on a device with no bf16 figure", "new", [*PLAN, "--devices", "oldphone", "--device-catalog",
                                                                  "cat_nobf16.yaml", "--precision", "bf16"]),
        Case("sweep --only seed=abc", "new", ["sweep", "base.yaml", "--only", "seed=abc", "--dry-run"]),
        Case("run --method nosuch", "new", ["run", "--method", "fedavgg", "--task", "tiny_text"]),
        Case("run --task nosuch", "new", ["run", "--method", "fedavg", "--task", "tiny_txt"]),
        Case("run --seed -1", "new", [*RUN, "--seed", "-1"]),
        Case("run --clients 0", "new", [*RUN, "--clients", "0"]),
        Case("run --per-round > --clients", "new", [*RUN, "--per-round", "5"]),
        Case("run --set nosuch=1", "new", [*RUN, "--set", "nosuch=1"]),
        Case("run --set '='", "new", [*RUN, "--set", "="]),
        Case("run --profile nosuch", "new", [*RUN, "--profile", "nosuch"]),
        Case("run --eval-every -1", "new", [*RUN, "--eval-every", "-1"]),
        Case("run --roc 0:0:0", "new", [*RUN, "--roc", "0:0:0"]),
        Case("run --capacities 12,-1", "new", [*RUN, "--capacities", "12,-1"]),
        Case("run --setting dir(-1)", "new", [*RUN, "--setting", "dir(-1)"]),
        Case("run --out ''", "new", [*RUN, "--out", ""]),
        Case("sweep --only bogus=1", "new", ["sweep", "base.yaml", "--only", "bogus=1", "--dry-run"]),
        Case("sweep: a preset with an unknown key", "new", ["sweep", "badkey_preset.yaml", "--dry-run"]),
        Case("sweep: a duplicate seed", "new", ["sweep", "dup_preset.yaml", "--dry-run"]),
        Case("export --per bogus", "new", ["export", "--records", "base", "--per", "bogus"]),
        Case("compare: records folder missing", "new", ["compare", "fedavg", "--against", "fedra", "--task", "tiny_text",
                                                             "--records", "no_such_dir"]),
        Case("SIGTERM mid-run on a tiny task", "new", [*RUN, "--rounds", "400", "--out", "c_term"],
             expect=130, writes=("c_term",), signal_after="c_term/tiny_text/fedavg",
             check=_record_status("c_term", "cancelled"), doc="docs/guide/running.md: 130 interrupted, a cancelled record"),
    ]
    if have.get("smallfs"):
        out.append(Case("a full disk after the first round", "6", [*RUN, "--rounds", "2", "--out", "smallfs/out"],
                        expect=1, writes=("smallfs",), check=_record_status("smallfs/out", "failed"),
                        doc="docs/guide/running.md: a full disk while saving is the failed record and one line"))
    return out
