"""The ``fedbench plan`` options (:mod:`fedbench.runners.budget.plan` runs it); imports no torch."""

from __future__ import annotations

from fedbench.runners.budget.shapes import PRECISIONS, SHAPES


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="per method and device class: allocation, memory, TFLOPs per step, traffic and "
                       "simulated seconds per round, on a real-size model without its weights (no training)")
    p.add_argument("--model", default="bert-base-uncased",
                   help=f"a named model shape ({', '.join(SHAPES)}; default bert-base-uncased)")
    p.add_argument("--model-config", help="a transformers config.json instead of a named shape")
    p.add_argument("--methods", help="comma-separated method keys (default: every registered method that trains "
                   "one architecture of the model's task kind)")
    p.add_argument("--devices", default="phone,laptop,workstation", help="comma-separated device classes "
                   "(default: phone,laptop,workstation)")
    p.add_argument("--device-catalog", help="YAML file of device classes added to or replacing the shipped catalogue")
    p.add_argument("--batch-size", type=int, default=16, help="local batch size (default 16)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence of text models (default 128)")
    p.add_argument("--steps", type=int, default=100, help="local steps per round for the simulated seconds "
                   "(default 100)")
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw", help="local optimizer (default adamw)")
    p.add_argument("--lora-r", type=int, default=16, help="global LoRA rank (default 16)")
    p.add_argument("--lora-targets", default="qv", help="LoRA target profile (default qv)")
    p.add_argument("--lora-dropout", type=float, default=0.1, help="LoRA dropout (default 0.1: the benchmark's "
                   "protocol, Fed-HeLLo Sec. IV-A; its mask is saved for backward)")
    p.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                   help="whose device throughput the seconds use (the step is measured in float32)")
    p.add_argument("--n-classes", type=int, default=100, help="classes of the classifier head (default 100)")


__all__ = ["add_parser"]
