"""How long bad input takes to be refused, against ``fedbench --help`` (issue 41's target: under 3x).

Each command runs in a fresh process (the console script of this environment), ``--repeats``
times, interleaved; the medians and their ratios are printed, with the load average, and
whether torch was imported before the error (``-X importtime`` of one more run of each bad
input). The bad inputs: an unknown ``--method``, an unknown ``--task``, a malformed
``--roc``, a negative ``--seed``, an unknown ``--executor``: what ``fedbench run`` checks
before the imports (``runners/cli/preflight.py``).

    python benchmarks/error_latency.py --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HELP = ["--help"]
BAD = {
    "unknown --method": ["run", "--method", "fedavgg", "--task", "tiny_text"],
    "unknown --task": ["run", "--method", "fedavg", "--task", "ledgr"],
    "malformed --roc": ["run", "--method", "fedavg", "--task", "tiny_text", "--roc", "6:x:1"],
    "negative --seed": ["run", "--method", "fedavg", "--task", "tiny_text", "--seed", "-1"],
    "unknown --executor": ["run", "--method", "fedavg", "--task", "tiny_text", "--executor", "pakced"],
}


def _cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "fedbench.runners.cli.cli", *args]


def wall(args: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run(_cmd(args), capture_output=True, text=True)
    return time.perf_counter() - t0, p.returncode


def imports_torch(args: list[str]) -> bool:
    p = subprocess.run([sys.executable, "-X", "importtime", *_cmd(args)[1:]], capture_output=True, text=True)
    return any(line.rstrip().endswith("| torch") for line in p.stderr.splitlines())


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    times: dict[str, list[float]] = {"--help": []} | {k: [] for k in BAD}
    for _ in range(a.repeats):  # interleaved: a change of load hits every command alike
        times["--help"].append(wall(HELP)[0])
        for name, args in BAD.items():
            t, code = wall(args)
            if code != 2:
                raise SystemExit(f"{name}: exit status {code}, expected 2")
            times[name].append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; median of {a.repeats} fresh processes")
    print(f"  fedbench --help: {med['--help']:.3f} s")
    ratios = {}
    for name, args in BAD.items():
        ratios[name] = med[name] / med["--help"]
        torch = "imports torch" if imports_torch(args) else "no torch"
        print(f"  {name}: {med[name]:.3f} s = {ratios[name]:.2f}x --help ({torch})")
    return ratios


if __name__ == "__main__":
    main()
