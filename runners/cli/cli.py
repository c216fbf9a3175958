"""``fedbench``: list, run, sweep, plan, leaderboard, plot, export, compare, claims.

The parser is built from the config fields' metadata (:mod:`fedbench.config`): every run
field with a flag becomes a ``fedbench run`` option with the field's help. ``list`` lives
in :mod:`~fedbench.runners.cli.listing`, ``run`` and ``sweep`` in
:mod:`~fedbench.runners.cli.commands`; the leaderboard commands are below.

Bad input (unknown method/task/setting, malformed --roc, unknown --set keys, a value out
of range, an unwritable --out, an invalid sweep preset, ...) ends with a one-line
``fedbench: error: ...`` and exit status 2, never a traceback, and before anything is
trained: every config is validated (``runners/core/config.py: validate_run``) and the output
directory created and checked first. Any other failure is one line too, with exit status 1
and the traceback in a file that line names (:mod:`~fedbench.runners.outputs.failures`):
beside the record for a run's failure, in the temp folder otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Sequence

from fedbench.errors import UserError
from fedbench.configs import flag_fields


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise UserError(message)


def _add_field_flag(p: argparse.ArgumentParser, section: str, f) -> None:
    """A flag derived from the field: its name, its help, bool fields as --x / --no-x switches,
    Literal fields with their choices, lists of choices as a repeatable flag; values are
    parsed by the field's type later."""
    import typing

    names = [f.flag] + [f"--{a.replace('_', '-')}" for a in f.aliases]
    kw: dict[str, Any] = dict(dest=f"{section}.{f.name}", default=None, help=f.help)
    if (section, f.name) == ("run", "executor"):  # every executor the source declares
        from fedbench.runners.cli.preflight import executor_keys

        kw["help"] = f"{f.help} (registered: {', '.join(executor_keys())})"
    if f.type is bool:  # --measure-flops / --no-measure-flops
        p.add_argument(*names, action=argparse.BooleanOptionalAction, **kw)
        return
    if typing.get_origin(f.type) is list and typing.get_origin(typing.get_args(f.type)[0]) is typing.Literal:
        # a list of choices is a repeatable flag: --log tensorboard --log mlflow
        p.add_argument(*names, action="append", choices=list(typing.get_args(typing.get_args(f.type)[0])),
                       metavar=f.name.upper(), **kw)
        return
    inner = [a for a in typing.get_args(f.type) if a is not type(None)] or [f.type]
    if typing.get_origin(inner[0]) is typing.Literal:
        kw["choices"] = list(typing.get_args(inner[0]))
    p.add_argument(*names, metavar=f.name.upper(), **kw)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", required=True, help="method key (see `fedbench list methods`)")
    p.add_argument("--task", required=True, help="task key (see `fedbench list tasks`)")
    for section, f in flag_fields():
        _add_field_flag(p, section, f)
    p.add_argument("--profile", metavar="NAME", help="sizes the task declares for a machine, filling the fields "
                   "left unset (e.g. ledgar's cpu: MiniLM, 32 tokens, 10 clients, 5 rounds: minutes on 2 cores); "
                   "the run is that of the same values given by hand")
    p.add_argument("--config", help="YAML file with sections run / method / task")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field: method.t_rgd=2, task.seq_len=128, lr=0.01 (run)")
    p.add_argument("--callback", action="append", default=[], metavar="MODULE:CLASS",
                   help="a Callback class to add to the run (instantiated without arguments), e.g. mypkg.log:Logger")
    p.add_argument("--force", action="store_true", help="run again even if a finished record exists (the new "
                   "record replaces it only if it ends ok)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    from fedbench.version import __version__

    p = _Parser(prog="fedbench", description="Benchmark suite for heterogeneous federated PEFT")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    p.add_argument("--version", action="version", version=f"fedbench {__version__}",
                   help="print the suite's version (the one every record it writes names) and exit")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    ls = sub.add_parser("list", help="list methods and tasks with one-line descriptions")
    ls.add_argument("what", nargs="?", choices=["methods", "tasks", "run", "all"], default="all")
    ls.add_argument("--fields", action="store_true", help="also list every config field with its default and help")
    run = sub.add_parser("run", help="run one method on one task and write a result record")
    _add_run_options(run)
    sw = sub.add_parser("sweep", help="run methods x settings x resources x seeds from a YAML preset (skips done runs)")
    sw.add_argument("preset", help="YAML preset (see benchmarks/)")
    sw.add_argument("--out", help="records directory (overrides the preset)")
    sw.add_argument("--dry-run", action="store_true", help="list the runs, whether they are done, and each run "
                    "to do's estimated cost and the total (measured s/round of the records, as `fedbench claims`); "
                    "past 500 runs, the first 500 and a count")
    sw.add_argument("--timing-records", action="append", default=["leaderboard/records"], metavar="DIR",
                    help="records that time --dry-run's estimates besides the sweep's own (default: "
                    "leaderboard/records; repeatable)")
    sw.add_argument("--no-progress", action="store_true")
    sw.add_argument("--only", action="append", metavar="KEY=V1,V2",
                    help="run only the preset's runs whose method, setting, seed, clients or roc, or config field "
                    "method.<field> / task.<field> / run.<field>, is one of the values (repeatable; e.g. --only "
                    "method=fed_hello,straggler --only setting=iid --only method.server_rule=authors_code; a list "
                    "value in brackets: --only run.tier_fractions=[0.5,0.75,1.0]); same run ids as the whole preset")
    sw.add_argument("--workers", type=int, help="run up to N runs at once as Ray tasks on a local Ray instance "
                    "(needs the [ray] extra; default: one after another in this process)")
    sw.add_argument("--address", help="join the Ray cluster at ADDR (e.g. 10.0.0.1:6379, or auto) instead of "
                    "starting a local instance")
    sw.add_argument("--cpus-per-run", type=float, help="CPU cores each run asks Ray for, and its torch threads "
                    "(default 1)")
    sw.add_argument("--gpus-per-run", type=float, help="GPUs each run asks Ray for; fractions share a GPU "
                    "(default: 1 where the machine or cluster has GPUs, else 0)")
    sw.add_argument("--node-retries", type=int, help="times a run whose Ray node or worker process died is "
                    "started again from its last checkpoint (default 2)")
    lb = sub.add_parser("leaderboard", help="write <out>/<task>.md leaderboards from result records "
                        "(committed tables: --records leaderboard/records --out leaderboard)")
    lb.add_argument("--records", default="results", help="records directory (default: results)")
    lb.add_argument("--out", default="results/leaderboard", help="output directory (default: results/leaderboard)")
    lb.add_argument("--plots", action="store_true", help="also draw the plots (needs matplotlib) and link them")
    pl = sub.add_parser("plot", help="draw learning curves, quality-vs-cost and per-tier cost plots (needs matplotlib)")
    pl.add_argument("--records", default="results", help="records directory (default: results)")
    pl.add_argument("--out", default="results/leaderboard", help="output directory (default: results/leaderboard)")
    ex = sub.add_parser("export", help="the leaderboard tables as CSV and JSON")
    ex.add_argument("--records", default="results", help="records directory (default: results)")
    ex.add_argument("--out", help="output directory, never inside the records folder (default: beside it, "
                    "<records>-export)")
    ex.add_argument("--per", choices=["cell", "run"], default="cell", help="one row per cell (default) or per run")
    from fedbench.runners.cli.plan_args import add_parser as add_plan_parser

    add_plan_parser(sub)
    cp = sub.add_parser("compare", help="paired t-tests of methods against others, per resource label and "
                        "setting, with Holm-adjusted p-values (a paper's 'A beats B' claim)")
    cp.add_argument("methods", nargs="+", metavar="METHOD", help="methods A")
    cp.add_argument("--against", nargs="+", required=True, metavar="METHOD", help="methods B to test A against")
    cp.add_argument("--task", required=True, help="task whose records to compare")
    cp.add_argument("--records", default="results", help="records directory (default: results)")
    cp.add_argument("--only", action="append", metavar="KEY=V1,V2",
                    help="compare only the records whose method, setting, seed, clients or roc (resource label), or "
                    "field method.<field> / task.<field> / run.<field> that tells rows apart, is one of the values "
                    "(repeatable; e.g. --only run.rounds=50 --only roc=6:3:1; a method field leaves the methods "
                    "without it in; a list value in brackets: --only run.tier_fractions=[0.5,0.75,1.0]); Holm corrects "
                    "over the comparisons left")
    cl = sub.add_parser("claims", help="test the seed papers' claims (leaderboard/claims/*.yaml) on result records: "
                        "paired difference, 95%% CI, Holm p, verdict (committed report: --all --records "
                        "leaderboard/records --out leaderboard/claims.md)")
    cl.add_argument("papers", nargs="*", metavar="PAPER", help="papers whose claims to test (a claim file's name)")
    cl.add_argument("--all", action="store_true", help="every paper with a claim file")
    cl.add_argument("--claims", default="leaderboard/claims", help="folder of claim files "
                    "(default: leaderboard/claims)")
    cl.add_argument("--records", default="leaderboard/records", help="records directory "
                    "(default: leaderboard/records)")
    cl.add_argument("--out", help="markdown file to write, with each paper's figure (measured A - B against the "
                    "paper's) drawn beside it in claims_gaps/ and linked (default: print the report)")
    return p


# ------------------------------------------------------------------------ leaderboard
def _print_paths(paths, records) -> int:
    for p in paths:
        print(p)
    if not paths:
        print(f"no records under {records}")
    return 0


def _need_matplotlib() -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError("plots need matplotlib: pip install 'fedbench-peft[plot]'")


def cmd_leaderboard(args) -> int:
    from fedbench.leaderboard.generate import generate

    if args.plots:
        _need_matplotlib()
    return _print_paths(generate(args.records, args.out, plots=args.plots), args.records)


def cmd_plot(args) -> int:
    _need_matplotlib()
    from fedbench.leaderboard.generate import generate

    return _print_paths(generate(args.records, args.out, plots=True), args.records)  # the tables link the PNGs


def cmd_export(args) -> int:
    from fedbench.leaderboard.export import export

    return _print_paths(export(args.records, args.out, args.per), args.records)


def cmd_compare(args) -> int:
    from fedbench.leaderboard.compare import compare, render_comparisons, select_records
    from fedbench.records import load_records

    records = [r for r in load_records(args.records) if r["run"]["task"] == args.task]
    if not records:
        raise UserError(f"no records of task {args.task!r} under {args.records}")
    records = select_records(records, args.only)
    methods = {r["run"]["method"] for r in records}
    missing = [m for m in [*args.methods, *args.against] if m not in methods]
    if missing:
        raise UserError(f"no records of method(s) {', '.join(missing)} for task {args.task!r} under {args.records}"
                        + (" that --only keeps" if args.only else ""))
    found = compare(args.task, records, args.methods, args.against)
    print(render_comparisons(args.task, found, args.methods, args.against), end="")
    return 0


def cmd_claims(args) -> int:
    from fedbench.leaderboard.claims import paper_names
    from fedbench.leaderboard.claims_report import build_report, write_report
    from fedbench.records import load_records

    if args.all == bool(args.papers):
        raise UserError("name the papers whose claims to test, or --all (not both)")
    papers = paper_names(args.claims) if args.all else args.papers
    if not papers:
        raise UserError(f"no claim files under {args.claims}")
    records = load_records(args.records)
    if args.out:  # with each paper's figure beside it, linked
        print(write_report(args.out, args.claims, records, papers))
    else:
        print(build_report(args.claims, records, papers), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        if args.cmd == "list":
            from fedbench.runners.cli.listing import cmd_list

            return cmd_list(args)
        if args.cmd in ("run", "sweep"):
            from fedbench.runners.cli.preflight import preflight_run, preflight_sweep

            (preflight_run if args.cmd == "run" else preflight_sweep)(args)  # common bad input, before torch
        if args.cmd in ("run", "sweep"):
            from fedbench.runners.cli.commands import cmd_run, cmd_sweep
            from fedbench.runners.core.signals import cancel_on_signals

            with cancel_on_signals():  # a signal between runs, or after the record is written: exit 130
                return (cmd_run if args.cmd == "run" else cmd_sweep)(args)
        if args.cmd == "plan":
            from fedbench.runners.budget.plan import cmd_plan

            return cmd_plan(args)
        return {"leaderboard": cmd_leaderboard, "plot": cmd_plot, "export": cmd_export,
                "compare": cmd_compare, "claims": cmd_claims}[args.cmd](args)
    except UserError as e:
        print(f"fedbench: error: {str(e).splitlines()[0] if str(e) else 'bad input'}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedbench: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 -- the one top-level handler: one line, the traceback in a file
        from fedbench.runners.outputs.failures import AfterRecord, crash_file, describe

        line = str(e) if isinstance(e, AfterRecord) else describe(e, crash_file(e), beside=False)
        print(f"fedbench: error: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
