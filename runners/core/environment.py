"""Where and with what a run runs: device, threads, code version, package versions."""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from fedbench import version
from fedbench.errors import UserError

def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise UserError(f"bad --device {spec!r}: use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {spec} asked for, but CUDA is not available on this machine")
    return dev


def check_torchvision() -> None:
    """torchvision's compiled operators load against this torch, or a :class:`UserError` saying
    how to pair them.

    transformers and timm import torchvision when they build a model; a torchvision built for
    another torch (PyPI's CUDA build next to a CPU-only torch from download.pytorch.org/whl/cpu,
    which pip mixes when that index is unreachable and it falls back to another) fails there
    with ``RuntimeError: operator torchvision::nms does not exist``, deep in a traceback. This
    import moves the failure to the start of the run, with the versions and the fix. Nothing
    when torchvision is not installed.
    """
    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is None:
        return
    try:
        importlib.import_module("torchvision")
    except (RuntimeError, OSError, ImportError) as e:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        try:
            tv = dist_version("torchvision")
        except PackageNotFoundError:
            tv = "?"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        tv_base, torch_base = tv.split("+")[0], torch.__version__.split("+")[0]
        raise UserError(
            f"torch {torch.__version__} and torchvision {tv} do not load together ({first}): they are two "
            "different builds, e.g. a CPU-only torch from download.pytorch.org/whl/cpu beside PyPI's CUDA "
            "torchvision. Install the pair from one index: pip install --force-reinstall "
            f"torch=={torch_base} torchvision=={tv_base} --index-url https://download.pytorch.org/whl/cpu "
            "(both then end in +cpu), or take PyPI's pair: pip install --force-reinstall torch torchvision"
        ) from None


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_threads(threads: int | None, tiny: bool) -> int:
    """``run.threads``; else ``OMP_NUM_THREADS`` when the environment sets it (a sweep that
    shares the cores between processes); else 1 for the tiny tasks (their ops are too
    small to split); else the cores given to this process."""
    if threads is not None:
        return threads
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return 1 if tiny else available_cores()


def git_info() -> tuple[str | None, bool | None]:
    root = Path(version.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return None, None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5)
        return commit.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def env_info(device: torch.device, threads: int | None = None) -> dict[str, Any]:
    def version(mod: str) -> str | None:
        try:
            return __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional packages
            return None

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"python": platform.python_version(), "torch": version("torch"), "transformers": version("transformers"),
            "peft": version("peft"), "timm": version("timm"), "gpu": gpu, "threads": threads}
