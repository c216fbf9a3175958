"""Real-size models without their weights, for ``fedbench plan``: named shapes and config.json.

A *model shape* is a transformers config: the architecture, every width and depth, the
vocabulary. Built on the ``meta`` device it has the real graph (every linear layer, every
attention, the real LoRA injected by peft) and no weights, so a metered step of it gives
the real step's FLOPs and accounted memory in seconds on a CPU, for models this machine
could not even hold. The shapes shipped here are the public configurations below, each
with its source; ``--model-config PATH`` reads any ``config.json`` of a supported family.

The small task classes (:class:`EncoderShape`, :class:`VisionShape`, :class:`CausalShape`)
give a planned step its loss: cross-entropy of a linear classifier on the pooled encoder
output (the [CLS] token, as bert fine-tuning does) or on ViT's [CLS] token, and the causal
LM's next-token loss on the whole sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedbench.errors import UserError, user_failure
from fedbench.infiles import read_json
from fedbench.runners.budget.plan_checks import check_model_config
from fedbench.tasks.base import ModelBundle, init_like
from fedbench.runners.budget.shapes import SHAPES
from fedbench.tasks.models import ENCODER_FAMILIES, LM_FAMILIES, EncoderClassifier, family_layout

#: transformers' ViT module layout (this version: vit.layers.j.attention.q_proj, ..., mlp.fc2)
VISION_LAYOUT = ("vit.layers", {"qv": ["attention.q_proj", "attention.v_proj"],
                                "proj_fc2": ["attention.o_proj", "mlp.fc2"]})


#: the largest --model-config read (a transformers config.json is a few KB)
MODEL_CONFIG_BYTES = 2**20


def load_config(name: str | None, path: str | None):
    """(transformers config, its description) of a named shape or a config.json file."""
    from transformers import AutoConfig

    if path:
        d = read_json(path, "--model-config", limit=MODEL_CONFIG_BYTES)  # a regular file, bounded
        if not isinstance(d, dict) or "model_type" not in d:
            raise UserError(f"--model-config {path} is not a transformers config.json (no model_type)")
        kw = {k: v for k, v in d.items() if k != "model_type"}
        try:
            return AutoConfig.for_model(d["model_type"], **kw), f"{path} ({d['model_type']})"
        except Exception as e:  # noqa: BLE001 -- transformers' validation errors are of several kinds
            raise UserError(f"--model-config {path}: {user_failure(e)}") from None
    if name not in SHAPES:
        raise UserError(f"unknown model shape {name!r} (known: {', '.join(SHAPES)}; or give --model-config PATH)")
    model_type, kw, source = SHAPES[name]
    return AutoConfig.for_model(model_type, **kw), source


class ShapeTask:
    """The loss of a planned step (see the module docstring); ``kind`` as tasks have it."""

    kind = "classification"

    def loss(self, model: nn.Module, batch: dict) -> tuple[torch.Tensor, Any]:
        logits = self.forward(model, batch)
        return nn.functional.cross_entropy(logits, batch["y"]), logits

    def forward(self, model: nn.Module, batch: dict) -> torch.Tensor:
        raise NotImplementedError

    def init_head(self, module: nn.Module, template: nn.Module) -> None:
        init_like(module, template)


class EncoderShape(ShapeTask):
    def forward(self, model, batch):
        return model(batch["input_ids"], batch["attention_mask"])

    def features(self, model, hidden, batch):
        return model.pool(hidden, batch["attention_mask"][:, : hidden.shape[1]])


class VisionShape(ShapeTask):
    def forward(self, model, batch):
        return model(pixel_values=batch["x"]).logits

    def features(self, model, hidden, batch):
        return hidden[:, 0]


class CausalShape(ShapeTask):
    kind = "generation"

    def loss(self, model, batch):
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["input_ids"])
        return out.loss, out


@dataclass
class Shape:
    """A model shape ready to plan: its task, how to build its bundle, a batch, a description."""

    task: ShapeTask
    config: Any
    source: str
    n_classes: int

    def bundle(self, device: str = "meta") -> ModelBundle:
        """The model on ``meta`` (no weights; or randomly initialised on ``device``) with its layer map."""
        from transformers import AutoModel, AutoModelForCausalLM, ViTForImageClassification

        cfg = self.config
        with torch.device(device):
            if isinstance(self.task, EncoderShape):
                blocks, targets = family_layout(cfg.model_type, ENCODER_FAMILIES, "encoder")
                model = EncoderClassifier(AutoModel.from_config(cfg, add_pooling_layer=False), self.n_classes,
                                          "cls", 0.0)
                return ModelBundle(model, f"encoder.{blocks}", targets, ["classifier"], default_target="qv")
            if isinstance(self.task, VisionShape):
                cfg.num_labels = self.n_classes
                return ModelBundle(ViTForImageClassification(cfg), VISION_LAYOUT[0], VISION_LAYOUT[1],
                                   ["classifier"], default_target="qv")
            blocks, targets = family_layout(cfg.model_type, LM_FAMILIES, "causal LM")
            return ModelBundle(AutoModelForCausalLM.from_config(cfg), blocks, targets, [], default_target="qv")

    def batch(self, batch_size: int, seq_len: int) -> dict:
        """A full batch on ``meta``: ``seq_len`` tokens, no padding (images at the config's size)."""
        m = torch.device("meta")
        if isinstance(self.task, VisionShape):
            s = self.config.image_size
            return {"x": torch.empty(batch_size, self.config.num_channels, s, s, device=m),
                    "y": torch.zeros(batch_size, dtype=torch.long, device=m)}
        ids = torch.ones(batch_size, seq_len, dtype=torch.long, device=m)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "y": torch.zeros(batch_size, dtype=torch.long, device=m)}


def shape_of(name: str | None, path: str | None, n_classes: int, seq_len: int | None = None) -> Shape:
    """The shape of the named model or ``--model-config``, checked (:mod:`.plan_checks`) at
    ``seq_len`` tokens (None: positions not checked)."""
    cfg, source = load_config(name, path)
    check_model_config(cfg, f"--model-config {path}" if path else f"model {name}", seq_len or 1,
                       text=cfg.model_type != "vit")
    if cfg.model_type in ENCODER_FAMILIES:
        task: ShapeTask = EncoderShape()
    elif cfg.model_type == "vit":
        task = VisionShape()
    elif cfg.model_type in LM_FAMILIES:
        task = CausalShape()
    else:
        raise UserError(f"model family {cfg.model_type!r} has no layer map here (supported: "
                        f"{', '.join(sorted([*ENCODER_FAMILIES, 'vit', *LM_FAMILIES]))})")
    return Shape(task, cfg, source, n_classes)


__all__ = ["SHAPES", "Shape", "ShapeTask", "load_config", "shape_of"]
