"""``fedbench plan``'s inputs checked against what the model can hold, before anything is
built: each a one-line :class:`~fedbench.errors.UserError` (exit 2).

* the options: every count >= 1 and at most :data:`LIMITS` (a batch of 10**12 examples
  overflows a tensor's storage before it says so), at least one device class;
* the model's config (a named shape or ``--model-config``): depth, width, heads, vocabulary,
  positions and image size positive integers within :data:`CONFIG_LIMITS` (a string, NaN or
  float is refused, not passed to transformers), the width a multiple of the heads, and
  ``--seq-len`` within the model's positions.
"""

from __future__ import annotations

from typing import Any

from fedbench.errors import UserError, shown

__all__ = ["CONFIG_LIMITS", "LIMITS", "check_model_config", "check_options"]

#: flag -> the largest value ``fedbench plan`` takes. Chosen bounds, from no paper or datasheet
#: (the reliability pass of 2026-11-28, issue 39): each is far above what the suite's presets
#: and papers use (batches up to 128, LexGLUE's 512 tokens, LoRA ranks up to 200 in Fed-SB's
#: authors' runs, LEDGAR's 100 classes) and turns an absurd value
#: (a batch of 10**12 overflows a tensor's storage before torch says so) into one line.
LIMITS = {"--batch-size": 2**16, "--seq-len": 2**20, "--steps": 10**7, "--lora-r": 2**14, "--n-classes": 10**6}

#: config field -> the largest value a planned model may have (a field the config lacks is not
#: checked). Chosen bounds as :data:`LIMITS`, above the largest open model's config: Llama-3.1-405B
#: has 126 layers, width 16,384, 128 heads, intermediate 53,248, vocabulary 128,256 and 131,072
#: positions (a test plans that shape's config checks, so lowering a bound below it fails).
CONFIG_LIMITS = {"num_hidden_layers": 1024, "hidden_size": 2**17, "num_attention_heads": 2**12,
                 "intermediate_size": 2**19, "vocab_size": 2**22, "max_position_embeddings": 2**22,
                 "image_size": 2**14, "patch_size": 2**10, "num_channels": 64}


def check_options(args) -> None:
    """The numeric options and the device list of ``fedbench plan``."""
    for flag, hi in LIMITS.items():
        v = getattr(args, flag[2:].replace("-", "_"))
        if not 1 <= v <= hi:
            raise UserError(f"{flag} must be an integer from 1 to {hi}, got {shown(v)}")
    if not 0 <= args.lora_dropout < 1:
        raise UserError(f"--lora-dropout must be in [0, 1), got {args.lora_dropout}")
    if not [d for d in args.devices.split(",") if d.strip()]:
        raise UserError(f"--devices {shown(args.devices)} names no device class (e.g. phone,laptop,workstation)")


def _int_field(cfg: Any, name: str, where: str) -> int | None:
    value = getattr(cfg, name, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{where}: {name} must be a positive integer, got {shown(value)}")
    if not 1 <= value <= CONFIG_LIMITS[name]:
        raise UserError(f"{where}: {name} must be from 1 to {CONFIG_LIMITS[name]}, got {value}")
    return value


def check_model_config(cfg: Any, where: str, seq_len: int, text: bool) -> None:
    """The transformers config ``cfg`` (``where`` names it) can be planned at ``seq_len``
    tokens (``text``: a text model, whose positions bound the sequence)."""
    values = {name: _int_field(cfg, name, where) for name in CONFIG_LIMITS}
    width, heads = values["hidden_size"], values["num_attention_heads"]
    if width is not None and heads is not None and width % heads:
        raise UserError(f"{where}: hidden_size {width} is not a multiple of num_attention_heads {heads}")
    positions = values["max_position_embeddings"]
    if text and positions is not None and seq_len > positions:
        raise UserError(f"--seq-len {seq_len} is beyond the model's {positions} positions ({where})")
    size, patch = values["image_size"], values["patch_size"]
    if not text and size is not None and patch is not None and size < patch:
        raise UserError(f"{where}: image_size {size} is smaller than patch_size {patch}")
