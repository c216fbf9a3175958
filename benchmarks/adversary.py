"""Try fedbench as an adversary would (issue 39's acceptance), and print one table row per case.

    OMP_NUM_THREADS=1 python benchmarks/adversary.py [--only SUBSTRING] [--keep]

Each case (``benchmarks/adversary_cases.py``: the issue's ten cause classes and new ones
beside them) runs ``python -m fedbench ...`` in a fresh temp folder holding the shared
fixtures (two tiny finished records, FIFOs, a copy of ``/dev/full`` where the user may make
device nodes, symlinks out of output folders, huge, deep and aliased inputs, broken plugins
and callbacks, tampered records, bad claim files), under a 30 s limit. Its verdict:

* ``clean``: exit 2, one stderr line ``fedbench: error: ...`` naming the problem, and no
  file, FIFO, device or link in the temp folder changed (nothing written or damaged; a
  refusal found once the data is read may leave the given, empty records folder);
* ``documented``: another exit status the case expects, with where that behaviour is
  documented; no traceback, nothing changed outside the paths the case may write;
* otherwise the defect: ``HANG`` (killed at 30 s), ``TRACEBACK``, ``EXIT n (want m)``,
  ``LINES n`` (not one line), ``CHANGED path``, ``STDERR`` (the expected text missing) or
  the case's own check.

The temp folder's state is compared before and after each case (type, mode, size and,
for files up to 1 MB, content hash; links by target). Exit status: 0 when every case
passes, 1 otherwise. Tiny tasks only; a few minutes on one core.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from adversary_cases import Case, cases, make_fixtures  # noqa: E402

LIMIT_S = 30
SMALL = 1 << 20


def snapshot(root: Path) -> dict[str, tuple]:
    """path -> (kind, size, hash or link target) of everything under ``root``; never opens
    anything but regular files (a FIFO or device is only stat-ed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                digest = st.st_mtime_ns
                if st.st_size <= SMALL:
                    with open(p, "rb") as f:
                        digest = hashlib.sha256(f.read()).hexdigest()
                out[rel] = ("file", st.st_size, digest)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = (stat.S_IFMT(st.st_mode), st.st_rdev)
    return out


def changed(before: dict, after: dict, allowed: tuple[str, ...]) -> list[str]:
    def ok(rel: str) -> bool:
        return any(rel == a or rel.startswith(a.rstrip("/") + "/") for a in allowed)
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and not ok(k))


def _env(root: Path, extra: dict | None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TMPDIR=str(root / "_tmp"), PYTHONHASHSEED="0",
               XDG_CACHE_HOME=str(root / "_cache"))  # the list cache: kept inside, fresh each harness run
    for k, v in (extra or {}).items():
        env[k] = str(root / v) if k == "PYTHONPATH" else v
    return env


def run_case(root: Path, case: Case) -> tuple[int | None, str, str, float]:
    """(exit status or None when killed at the limit, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fedbench", *case.argv], cwd=root, env=_env(root, case.env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    if case.signal_after:  # interrupt once the run has written into its records folder
        target = root / case.signal_after
        while proc.poll() is None and time.monotonic() - t0 < LIMIT_S - 10:
            if target.is_dir() and any(target.iterdir()):
                os.killpg(proc.pid, signal.SIGTERM)
                break
            time.sleep(0.2)
    try:
        out, err = proc.communicate(timeout=max(1.0, LIMIT_S - (time.monotonic() - t0)))
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    return rc, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0


def verdict(root: Path, case: Case, rc: int | None, err: str, diff: list[str]) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    if rc is None:
        return f"HANG (> {LIMIT_S} s)"
    if "Traceback (most recent call last)" in err:
        return "TRACEBACK"
    if rc != case.expect:
        return f"EXIT {rc} (want {case.expect})"
    if diff:
        return f"CHANGED {diff[0]}" + (f" (+{len(diff) - 1})" if len(diff) > 1 else "")
    if case.expect == 2 and (len(lines) != 1 or not lines[0].startswith("fedbench: error: ")):
        return f"LINES {len(lines)}"
    if case.stderr and not re.search(case.stderr, err, re.IGNORECASE | re.DOTALL):
        return f"STDERR lacks {case.stderr!r}"
    problem = case.check(root) if case.check else None
    if problem:
        return problem
    return "clean" if case.expect == 2 else "documented"


def _cell(text: str, width: int = 110) -> str:
    text = text if len(text) <= width else text[: width - 3] + "..."  # cut, then escape for markdown
    return text.replace("|", "\\|").replace("`", "'").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run only the cases whose name contains this")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (its path is printed)")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="fedbench-adversary-"))
    (root / "_tmp").mkdir()
    (root / "_cache").mkdir()
    t0 = time.monotonic()
    have = make_fixtures(root, lambda a: subprocess.run([sys.executable, "-m", "fedbench", *a], cwd=root,
                                                        env=_env(root, None), capture_output=True).returncode)
    todo = [c for c in cases(have) if not args.only or args.only in c.name]
    print(f"fixtures in {time.monotonic() - t0:.0f} s; {len(todo)} cases"
          + ("" if have.get("devnode") else " (no device node could be made: the device cases are left out)"))
    print("| # | class | case | exit | first stderr line | verdict |")
    print("|---|---|---|---|---|---|")
    bad = 0
    for i, case in enumerate(todo, 1):
        before = snapshot(root)
        rc, _out, err, _s = run_case(root, case)
        after = snapshot(root)
        diff = changed(before, after, (*case.writes, "_tmp", "_cache") if case.expect != 2 else case.writes)
        if case.expect == 2:  # in the given records folder a refusal may leave empty folders, no file
            diff += [k for k in changed(before, after, ()) if k not in diff and after.get(k, ("gone",))[0] != "dir"]
        v = verdict(root, case, rc, err, diff)
        first = next((line for line in err.splitlines() if line.strip()), "")
        if v not in ("clean", "documented"):
            bad += 1
        elif v == "documented":
            v = f"documented ({case.doc})"
        print(f"| {i} | {case.cls} | {_cell(case.name, 60)} | {rc if rc is not None else 'killed'} | "
              f"{_cell(first)} | {_cell(v, 80)} |", flush=True)
    print(f"\n{len(todo) - bad} of {len(todo)} cases clean or documented, {bad} defects; "
          f"{time.monotonic() - t0:.0f} s in all")
    if have.get("smallfs"):
        subprocess.run(["umount", str(root / "smallfs")], capture_output=True)
    if args.keep:
        print(f"temp folder kept: {root}")
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
