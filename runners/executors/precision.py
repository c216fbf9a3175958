"""Reduced precision: ``run.precision`` (``fp32`` or ``bf16``) as an autocast context.

``bf16`` runs every forward (training and evaluation) under ``torch.autocast`` with
``torch.bfloat16``: matrix products and convolutions in bfloat16, reductions, norms and
the loss in float32 (autocast's per-operator policy); parameters, gradients and the
optimizer state stay float32 (mixed precision, Micikevicius et al. 2018, without loss
scaling: bfloat16 has float32's exponent range). On CPU this needs bf16 kernels
(AVX512-BF16/AMX) to be faster; on CUDA, Ampere or newer.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

PRECISIONS = ("fp32", "bf16")


def autocast(device: torch.device, precision: str) -> ContextManager:
    """The forward's precision context on ``device``: nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")


__all__ = ["PRECISIONS", "autocast"]
