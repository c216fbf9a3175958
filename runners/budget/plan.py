"""``fedbench plan``: methods x device classes on a model, without training and without weights.

For every method and device class: the allocation the method gives a client of that device
(:mod:`fedbench.runners.budget.allocation`: the largest rung of the ladder whose plan fits the
device's memory), that plan's accounted memory and TFLOPs per step (one metered step of
the real graph on the ``meta`` device, :mod:`fedbench.runners.cost.stepcost`), its traffic per
round (the method's own ``traffic`` hook on the payload and upload it would exchange) and
its simulated seconds per round on the device (``--steps`` local steps at the device's
throughput + the traffic at its links). A device that cannot hold the method's smallest
allocation gets a row saying so and why.

Measured: FLOPs and accounted bytes (of the real graph, on meta tensors), bytes of traffic.
Simulated: seconds (the catalogue's rates).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from fedbench.errors import UserError
from fedbench.runners.budget.plan_checks import check_options
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.budget.allocation import Planner, ProbeSetup, ladder
from fedbench.runners.budget.devices import Device, client_seconds, load_catalog
from fedbench.runners.budget.plan_models import shape_of
from fedbench.runners.core.environment import check_torchvision
from fedbench.runners.cost.stepcost import on_meta
from fedbench.runners.core.spec import TrainSettings
from fedbench.units import GB, MB

log = logging.getLogger(__name__)



@dataclass
class Row:
    method: str
    device: str
    fits: bool
    why: str = ""
    layers: int | None = None
    rank: int | None = None
    skip: bool = False
    trained_layers: int | None = None
    mem_gb: float | None = None
    tflops_step: float | None = None
    traffic_mb: float | None = None
    seconds: float | None = None


def method_config(method_cls, lora_r: int, targets: str, dropout: float, kind: str):
    """The method's default config with one LoRA for all (alpha = r, as the benchmark protocol)."""
    import dataclasses

    cfg = method_cls.config_cls()
    cfg = dataclasses.replace(cfg, lora_r=lora_r, lora_alpha=float(lora_r), lora_targets=targets, lora_dropout=dropout)
    return method_cls.resolve_config(cfg, kind)


def step_settings(batch_size: int, optimizer: str) -> TrainSettings:
    """The local settings a planned step runs with: one epoch of ``batch_size``, ``optimizer``."""
    return TrainSettings(local_epochs=1, batch_size=batch_size, optimizer=optimizer, lr=1e-3, momentum=0.0,
                         weight_decay=0.0, grad_clip=None, max_steps=None)


def meta_planner(shape, method_cls, cfg, batch: dict, settings: TrainSettings) -> Planner:
    """A :class:`Planner` of ``method_cls`` (config ``cfg``) on ``shape``'s model built on
    ``meta`` (no weights), its steps metered on ``batch`` (``shape.batch``); the probe
    federation runs 10 rounds. ``planner.probe(layers, rank)`` measures one budget."""
    with on_meta():
        am = AdapterModel(shape.bundle(), cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_targets, "meta")
        setup = ProbeSetup(am=am, task=shape.task, batch=batch, settings=settings, rounds=10,
                           n_classes=shape.n_classes, data_info={})
        return Planner(method_cls, cfg, setup)


def plan_rows(model: str | None, model_config: str | None, methods: list[str], devices: dict[str, Device],
              batch_size: int, seq_len: int, steps: int, optimizer: str, lora_r: int, targets: str,
              dropout: float, precision: str, n_classes: int, explicit: bool = True,
              progress=None) -> tuple[list[Row], str]:
    """The table's rows and the model's description (``explicit``: the methods were named;
    otherwise those that cannot train this model are left out silently). ``progress``, a
    callable, gets a line as each method's rows are done (``[2/18] fedra: 3 rows, 4.1 s``)."""
    import time

    from fedbench.methods import METHODS
    from fedbench.methods.paper_defaults import paper_defaults

    shape = shape_of(model, model_config, n_classes, seq_len)
    settings = step_settings(batch_size, optimizer)
    batch = shape.batch(batch_size, seq_len)
    rows: list[Row] = []
    t0 = time.perf_counter()
    for i, key in enumerate(methods):
        if progress is not None and i:
            progress(f"[{i}/{len(methods)}] {methods[i - 1]}: {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        cls = METHODS.get(key)
        if shape.task.kind not in cls.task_kinds or cls.needs_archs or cls.needs_parts:
            if explicit:  # asked for by name: say why it has no row of figures
                rows += [Row(key, d, False, f"{key} does not train a {shape.task.kind} model of one architecture")
                         for d in devices]
            continue
        cfg = method_config(cls, lora_r, targets, dropout, shape.task.kind)
        planner = meta_planner(shape, cls, cfg, batch, settings)
        am = planner.s.am
        rungs = ladder(am.bundle.n_layers, min(max(paper_defaults(shape.task.kind).tier_ranks), cfg.lora_r))
        for name, dev in sorted(devices.items(), key=lambda kv: kv[1].memory_bytes):
            try:
                p = planner.allocate(dev.memory_bytes, rungs)
            except UserError as e:
                rows.append(Row(key, name, False, str(e)))
                continue
            if p is None:
                low = planner.probe(*rungs[-1])
                rows.append(Row(key, name, False, f"its smallest allocation needs {low.accounted_bytes / GB:.3g} GB "
                                                  f"> {dev.memory_gb:g} GB"))
                continue
            if p.skip:
                rows.append(Row(key, name, True, "takes no part (cannot train the full model)", p.layers, p.rank,
                                True, 0, 0.0, 0.0, 0.0, 0.0))
                continue
            t = p.traffic
            sec = client_seconds(dev, p.figures.flops * steps, t.down_bytes, t.up_bytes, precision)["total"]
            rows.append(Row(key, name, True, "", p.layers, p.rank, False, len(p.plan.train_layers),
                            p.accounted_bytes / GB, p.figures.flops / 1e12, (t.down_bytes + t.up_bytes) / MB, sec))
    if progress is not None and methods:
        progress(f"[{len(methods)}/{len(methods)}] {methods[-1]}: {time.perf_counter() - t0:.1f} s")
    return rows, shape.source


def render(rows: list[Row], source: str, devices: dict[str, Device], args) -> str:
    lines = [f"model: {source}",
             f"batch {args.batch_size} x {args.seq_len} tokens, {args.optimizer}, LoRA r {args.lora_r} on "
             f"{args.lora_targets}; seconds = {args.steps} steps at {args.precision} + traffic (simulated)",
             *[f"device {n}: {d.memory_gb:g} GB, {d.tflops.get(args.precision, 0):g} TFLOP/s {args.precision}, "
               f"up {d.uplink_mbps:g} / down {d.downlink_mbps:g} Mbps ({d.source.split(';')[0]})"
               for n, d in devices.items()], "",
             "| method | device | layers | rank | trained layers | accounted GB | TFLOPs/step | traffic MB/round "
             "| sim. s/round | note |", "|---|---|---|---|---|---|---|---|---|---|"]

    def f(x, fmt):
        return "" if x is None else format(x, fmt)

    for r in rows:
        lines.append(f"| {r.method} | {r.device} | {f(r.layers, 'd')} | {f(r.rank, 'd')} | "
                     f"{f(r.trained_layers, 'd')} | {f(r.mem_gb, '.3f')} | {f(r.tflops_step, '.4g')} | "
                     f"{f(r.traffic_mb, '.3f')} | {f(r.seconds, '.1f')} | "
                     f"{r.why} |")
    return "\n".join(lines) + "\n"


def cmd_plan(args) -> int:
    from fedbench.methods import METHODS

    check_options(args)  # every count within what a model can hold, a device named
    check_torchvision()  # before transformers imports it while building the shapes
    catalog = load_catalog(args.device_catalog)
    names = [d.strip() for d in args.devices.split(",") if d.strip()]
    unknown = [n for n in names if n not in catalog]
    if unknown:
        raise UserError(f"unknown device class {unknown[0]!r} (known: {', '.join(sorted(catalog))})")
    methods = [m.strip() for m in args.methods.split(",")] if args.methods else list(METHODS.keys())
    for m in methods:
        METHODS.get(m)  # unknown keys: one line with "did you mean"
    devices = {n: catalog[n] for n in names}
    rows, source = plan_rows(args.model, args.model_config, methods, devices, args.batch_size, args.seq_len,
                             args.steps, args.optimizer, args.lora_r, args.lora_targets, args.lora_dropout, args.precision,
                             args.n_classes, explicit=bool(args.methods),
                             progress=lambda line: print(f"fedbench plan: {line}", file=sys.stderr, flush=True))
    print(render(rows, source, devices, args), end="")
    return 0


__all__ = ["Row", "cmd_plan", "meta_planner", "plan_rows", "render", "step_settings"]
