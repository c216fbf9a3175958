"""The ``results`` and ``cost`` sections of a record, from the round logs and the
clients' costs (pure functions of what the History callback collected)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from fedbench.runners.core.state import RoundLog
from fedbench.runners.cost.meters import ClientCost
from fedbench.tasks.base import EvalResult

MB = 1e6
GB = 1e9

#: cost fields that measure this process (wall time, the meter's bookkeeping, peak RSS):
#: they differ between runs of one config and between engines; everything else in the
#: record is reproducible from the seed
PROCESS_MEASURES = frozenset({
    "seconds_per_round", "seconds_total", "seconds_per_client_step", "client_seconds_total", "round_seconds_total",
    "eval_seconds_total", "eval_seconds_per_round", "server_seconds_total", "meter_measurements", "meter_reused",
    "rss_peak_gb"})


def _mean(xs) -> float | None:
    """The mean, clamped into [min, max]: float rounding can put the mean of equal values
    one ulp above them (np.mean([3.334959104] * 3) > 3.334959104), and a record whose
    mean exceeds its max is wrong to anyone who reads it."""
    xs = list(xs)
    return float(min(max(np.mean(xs), min(xs)), max(xs))) if xs else None


def results_section(logs: Sequence[RoundLog], last: EvalResult | None, initial: EvalResult | None,
                    metric_name: str, evaluation: str, per_client: dict | None, archs: dict[int, str]) -> dict:
    curve = [{"round": l.round, "metric": l.metric, "train_loss": l.train_loss, "sim_seconds": l.sim_seconds,
              "dropped": list(l.dropped), "traffic_mb": l.traffic_bytes / MB} for l in logs]
    evals = [(l.metric, l.round) for l in logs if l.metric is not None and math.isfinite(l.metric)]
    best = max(evals) if evals else (None, None)
    out = {
        "metric_name": last.metric_name if last else metric_name,
        "final": last.value if last else None, "best": best[0], "best_round": best[1],
        "per_domain": last.per_domain if last else None, "extra": dict(last.extra) if last else {},
        "curve": curve, "evaluation": evaluation,
        "initial": None if initial is None else {"metric": initial.value, "per_domain": initial.per_domain,
                                                 "extra": dict(initial.extra)},
        "per_client": {str(c): v for c, v in sorted((per_client or {}).items())},
        "local": local_summary(per_client, archs) if per_client else None,
        "untrained_clients": untrained_section(last) if evaluation == "local" else None,
    }
    return out


def untrained_section(last: EvalResult | None) -> dict | None:
    """Local evaluation: how many clients never trained and their scores (a fresh model's),
    kept out of ``final``, ``per_client`` and ``local``; null before any evaluation."""
    if last is None:
        return None
    return {"count": len(last.untrained_clients),
            "per_client": {str(c): v for c, v in sorted(last.untrained_clients.items())}}


def local_summary(per_client: dict[int, float], archs: dict[int, str]) -> dict:
    """Mean, std (ddof 0), min, median over clients, and the mean per architecture."""
    vals = np.array([v for v in per_client.values()], dtype=np.float64)
    by_arch: dict[str, list[float]] = {}
    for c, v in per_client.items():
        by_arch.setdefault(archs.get(c, "default"), []).append(v)
    return {"mean": _mean(vals), "std": float(vals.std()), "min": float(vals.min()),
            "median": float(np.median(vals)), "by_arch": {a: _mean(v) for a, v in sorted(by_arch.items())}}


def traffic_variants(costs: Sequence[ClientCost]) -> dict:
    """Per label of ``Traffic.down_variants`` (``Method.traffic``): the per-client-round
    traffic (MB) with the down traffic counted that way (up unchanged), over the
    client-rounds that report it (every trained client of such a method), by tier too."""
    labels = sorted({k for c in costs for k in c.down_variants})
    out = {}
    for label in labels:
        cs = [c for c in costs if label in c.down_variants]

        def tr(items):
            return {"down": _mean(c.down_variants[label] / MB for c in items), "up": _mean(c.up_bytes / MB for c in items),
                    "total": _mean((c.down_variants[label] + c.up_bytes) / MB for c in items)}

        out[label] = {**tr(cs), "by_tier": {str(t): tr([c for c in cs if c.tier == t])
                                            for t in sorted({c.tier for c in cs})}}
    return out


def cost_section(costs: Sequence[ClientCost], logs: Sequence[RoundLog], device_type: str, server_flops: float,
                 server_seconds: float, seconds_total: float, measured: int, reused: int) -> dict:
    trained = [c for c in costs if c.steps > 0]
    mem_source = "cuda" if device_type == "cuda" else "accounted"

    def by_tier(items, fn):
        return {str(t): fn([c for c in items if c.tier == t]) for t in sorted({c.tier for c in items})}

    def step_t(cs):
        return {"mean": _mean((c.flops_forward_step + c.flops_backward_step) / 1e12 for c in cs),
                "forward": _mean(c.flops_forward_step / 1e12 for c in cs),
                "backward": _mean(c.flops_backward_step / 1e12 for c in cs)}

    peak = (lambda c: c.cuda_peak_bytes) if mem_source == "cuda" else (lambda c: c.accounted_bytes)

    def mem(cs, f):
        return {"mean": _mean(f(c) / GB for c in cs), "max": max((f(c) / GB for c in cs), default=None)}

    def traffic(cs):
        return {"down": _mean(c.down_bytes / MB for c in cs), "up": _mean(c.up_bytes / MB for c in cs),
                "total": _mean((c.down_bytes + c.up_bytes) / MB for c in cs)}

    measured_costs = [c for c in trained if c.flops_forward_step > 0]
    steps = sum(c.steps for c in trained)
    client_seconds = sum(c.seconds for c in trained)
    evals = [l.eval_seconds for l in logs if l.metric is not None]
    return {
        "tflops_per_step": {**{k: step_t(measured_costs)[k2] for k, k2 in
                               (("mean", "mean"), ("forward_mean", "forward"), ("backward_mean", "backward"))},
                            "by_tier": by_tier(measured_costs, step_t)},
        "tflops_total": sum(c.flops_total for c in trained) / 1e12 if measured_costs else None,
        "server_tflops_total": server_flops / 1e12,
        "flops_source": "measured (composed from per-part measurements): FlopCounterMode and the saved-tensor "
                        "meter per block and for the rest of the model, each part measured once per state (its "
                        "shapes, which of its tensors train, whether a block below trains) and the first step of "
                        "every client-round summed from its parts' figures; scaled by batch size over its steps",
        "peak_mem_gb": {**mem(measured_costs, peak), "by_tier": by_tier(measured_costs, lambda cs: mem(cs, peak))},
        "peak_mem_source": mem_source,
        "accounted_mem_gb": {**mem(measured_costs, lambda c: c.accounted_bytes),
                             "by_tier": by_tier(measured_costs, lambda cs: mem(cs, lambda c: c.accounted_bytes))},
        "traffic_mb_per_client_round": {**traffic(costs), "by_tier": by_tier(costs, traffic)},
        "traffic_mb_total": sum(c.down_bytes + c.up_bytes for c in costs) / MB,
        "traffic_alt_mb_per_client_round": traffic_variants(costs),
        "seconds_per_round": _mean(l.seconds for l in logs),
        "seconds_total": seconds_total,
        "seconds_per_client_step": client_seconds / steps if steps else None,
        "server_seconds_total": server_seconds,
        "client_seconds_total": client_seconds,
        "round_seconds_total": sum(l.seconds for l in logs),
        "eval_seconds_total": sum(evals),
        "eval_seconds_per_round": _mean(evals),
        "meter_measurements": measured,
        "meter_reused": reused,
        "rss_peak_gb": _rss(trained, by_tier),
    }


def _rss(trained: Sequence[ClientCost], by_tier) -> dict | None:
    """Measured peak RSS of the process per client (mean/max, per tier); None where unmeasured."""
    measured = [c for c in trained if c.rss_peak_bytes is not None]
    if not measured:
        return None

    def mm(cs):
        return {"mean": _mean(c.rss_peak_bytes / GB for c in cs), "max": max(c.rss_peak_bytes / GB for c in cs)}

    return {**mm(measured), "by_tier": by_tier(measured, mm)}


def target_section(target: float | None, logs: Sequence[RoundLog], costs: Sequence[tuple[int, ClientCost]],
                   bytes_per_param: int = 4) -> dict | None:
    """FedLoRA Sec. 6.1's cost metrics: the first evaluated round whose metric reaches
    ``target``, and the parameters transmitted (down + up, all clients; bytes /
    ``bytes_per_param``: float32 tensors) and client training TFLOPs of rounds 1..that
    round; with ``--devices`` also the simulated seconds of rounds 1..that round (the sum of
    the round log's ``sim_seconds``; null without devices). None without a target; null
    numbers when the target was never reached."""
    if target is None:
        return None
    hit = next((l.round for l in logs if l.metric is not None and math.isfinite(l.metric) and l.metric >= target),
               None)
    if hit is None:
        return {"metric": float(target), "reached": False, "round": None, "params_transmitted": None,
                "traffic_mb": None, "tflops": None, "sim_seconds": None}
    upto = [c for r, c in costs if r <= hit]
    nbytes = sum(c.down_bytes + c.up_bytes for c in upto)
    return {"metric": float(target), "reached": True, "round": int(hit),
            "params_transmitted": float(nbytes / bytes_per_param), "traffic_mb": nbytes / MB,
            "tflops": sum(c.flops_total for c in upto) / 1e12, "sim_seconds": sim_until(logs, hit)}


def sim_until(logs: Sequence[RoundLog], last_round: int) -> float | None:
    """Simulated seconds of rounds 1..``last_round`` (None when the rounds have no simulated time)."""
    times = [l.sim_seconds for l in logs if l.round <= last_round]
    return None if not times or any(t is None for t in times) else float(sum(times))
