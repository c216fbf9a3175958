"""Client device classes and federations as device mixes (``--devices``, ``--device-catalog``).

A device class has a memory budget, a sustained throughput per precision and an uplink and
downlink; the shipped catalogue is ``fedbench/devices.yaml`` (each entry names its source),
a user file adds or overrides entries. A federation is a mix such as
``phone:6,laptop:3,workstation:1`` (shares, like ``--roc``: exact counts by
:func:`~fedbench.runners.core.tiers.largest_remainder`, spread over the clients by a seeded
permutation) or a per-client list ``phone,laptop,phone`` (cycled over the clients, like
``--capacities``).

Simulated time of a client-round (:func:`client_seconds`) = its training FLOPs at the
device's throughput + its down and up bytes at the device's links. It is a simulation of
the device, not a measurement: the FLOPs and bytes are measured, the rates are the
catalogue's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from typing import Mapping

import numpy as np

from fedbench.infiles import read_yaml
from fedbench.errors import UserError, shown
from fedbench.numbers import exact_number
from fedbench.runners.budget.shapes import PRECISIONS
from fedbench.runners.core.tiers import largest_remainder
from fedbench.units import GB

_KEYS = {"memory_gb", "tflops", "uplink_mbps", "downlink_mbps", "source"}


@dataclass(frozen=True)
class Device:
    """One device class of the catalogue."""

    name: str
    memory_gb: float
    tflops: Mapping[str, float]  # precision -> sustained TFLOP/s
    uplink_mbps: float
    downlink_mbps: float
    source: str

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * GB)

    def rate(self, precision: str) -> float:
        """FLOP/s at ``precision`` (one line naming the device when it has no figure for it)."""
        if precision not in self.tflops:
            raise UserError(f"device {self.name!r} has no throughput for {precision} (has: "
                            f"{', '.join(sorted(self.tflops))})")
        return float(self.tflops[precision]) * 1e12

    def describe(self) -> dict:
        return {"name": self.name, "memory_gb": self.memory_gb, "tflops": dict(self.tflops),
                "uplink_mbps": self.uplink_mbps, "downlink_mbps": self.downlink_mbps, "source": self.source}


#: the largest figure a catalogue entry may give (GB, TFLOP/s, Mbit/s): beyond them a
#: figure is a typo, and 1e300 GB overflows when turned into bytes. Chosen bounds, from no
#: datasheet: a petabyte, an exaFLOP/s and a petabit/s, each hundreds of times one device's
#: (an NVIDIA H200: 141 GB, under 4,000 TFLOP/s even at FP8 with sparsity)
MAX_FIGURE = {"memory_gb": 1e6, "tflops": 1e6, "uplink_mbps": 1e9, "downlink_mbps": 1e9}


def _positive(name: str, key: str, value) -> float:
    hi = MAX_FIGURE[key.split(".")[0]]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= hi:
        raise UserError(f"device {name!r}: {key} must be a number > 0 and <= {hi:g}, got {shown(value)}")
    return float(value)


def _device(name: str, entry, where: str) -> Device:
    if not isinstance(entry, dict):
        raise UserError(f"{where}: device {name!r} must be a mapping of {', '.join(sorted(_KEYS))}")
    unknown = sorted(set(entry) - _KEYS)
    missing = sorted(_KEYS - set(entry))
    if unknown or missing:
        raise UserError(f"{where}: device {name!r} " + (f"has unknown keys {unknown}" if unknown
                                                         else f"lacks {missing}"))
    tf = entry["tflops"]
    if not isinstance(tf, dict) or not tf or any(p not in PRECISIONS for p in tf):
        raise UserError(f"{where}: device {name!r}: tflops must map precisions ({', '.join(PRECISIONS)}) to TFLOP/s")
    if not isinstance(entry["source"], str) or not entry["source"].strip():
        raise UserError(f"{where}: device {name!r} must name its source (a datasheet or a published measurement)")
    return Device(name, _positive(name, "memory_gb", entry["memory_gb"]),
                  {p: _positive(name, f"tflops.{p}", v) for p, v in tf.items()},
                  _positive(name, "uplink_mbps", entry["uplink_mbps"]),
                  _positive(name, "downlink_mbps", entry["downlink_mbps"]), entry["source"].strip())


def _entries(doc, where: str) -> dict[str, Device]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise UserError(f"{where} must be a mapping: device name -> memory_gb, tflops, uplink_mbps, ...")
    return {str(k): _device(str(k), v, where) for k, v in doc.items()}


def load_catalog(user_file: str | None = None) -> dict[str, Device]:
    """The shipped catalogue, with the entries of ``user_file`` (YAML) added or replacing."""
    import yaml

    text = resources.files("fedbench").joinpath("devices.yaml").read_text(encoding="utf-8")
    catalog = _entries(yaml.safe_load(text), "the shipped device catalogue")
    if user_file:
        catalog.update(_entries(read_yaml(user_file, "device catalogue"), f"device catalogue {user_file}"))
    return catalog


def parse_devices(spec: str, n_clients: int, catalog: Mapping[str, Device], seed: int) -> list[str]:
    """The device class of every client: ``a:6,b:3`` (shares) or ``a,b,a`` (per client, cycled)."""
    spec_shown = shown(str(spec))
    items = [s.strip() for s in str(spec).split(",") if s.strip()]
    if not items:
        raise UserError(f"malformed --devices {spec_shown}: expected e.g. phone:6,laptop:3,workstation:1")
    shares = [":" in s for s in items]
    if any(shares) and not all(shares):
        raise UserError(f"malformed --devices {spec_shown}: give shares for every class (phone:6,laptop:3) or a "
                        f"per-client list (phone,laptop,phone), not both")
    names = [s.split(":", 1)[0].strip() for s in items]
    unknown = [n for n in names if n not in catalog]
    if unknown:
        raise UserError(f"unknown device class {unknown[0]!r} in --devices (known: {', '.join(sorted(catalog))}; "
                        f"add it with --device-catalog FILE)")
    if not all(shares):
        return [names[i % len(names)] for i in range(n_clients)]
    if len(set(names)) != len(names):
        raise UserError(f"malformed --devices {spec_shown}: a device class is named twice")
    try:
        fr = [exact_number(s.split(":", 1)[1]) for s in items]
    except ValueError as e:
        raise UserError(f"malformed --devices {spec_shown}: shares must be numbers, e.g. phone:6,laptop:3 ({e})") from None
    if any(f < 0 for f in fr) or sum(fr) <= 0:
        raise UserError(f"malformed --devices {spec_shown}: shares must be >= 0 with a positive sum")
    counts = largest_remainder(n_clients, fr)
    per_client = np.repeat(np.arange(len(names)), counts)
    order = np.random.default_rng([seed, 11]).permutation(per_client)
    return [names[int(i)] for i in order]


def client_seconds(device: Device, flops: float, down_bytes: int, up_bytes: int, precision: str = "fp32") -> dict:
    """Simulated seconds of one client-round on ``device``: compute (``flops`` at its
    throughput) + download + upload (bytes x 8 at its links)."""
    compute = flops / device.rate(precision)
    down = down_bytes * 8 / (device.downlink_mbps * 1e6)
    up = up_bytes * 8 / (device.uplink_mbps * 1e6)
    return {"compute": compute, "down": down, "up": up, "total": compute + down + up}


__all__ = ["Device", "PRECISIONS", "client_seconds", "load_catalog", "parse_devices"]
