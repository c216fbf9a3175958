"""Vision backbones: timm ViT / MLP-Mixer by name (hub, HF cache or a local folder) and
the tiny random-init test models, with their LoRA layer maps (``proj_fc2``: attention
output projection + MLP fc2, FedRA's placement; ``qv``: query and value, Fed-HeLLo's, i.e.
timm's fused ``attn.qkv``)."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from torch import nn

from fedbench.errors import UserError
from fedbench.tasks.models import IMAGENET_MEAN, IMAGENET_STD, TINY_VISION, fixed_init, hub_reachable, read_config

log = logging.getLogger(__name__)

VIT_TARGETS = {"proj_fc2": ["attn.proj", "mlp.fc2"], "qv": ["attn.qkv"]}
MIXER_TARGETS = {"proj_fc2": ["mlp_tokens.fc2", "mlp_channels.fc2"], "qv": ["mlp_tokens.fc2", "mlp_channels.fc2"]}


def vision_defaults(name: str) -> tuple[int, tuple[float, ...], tuple[float, ...]]:
    """(native image side, normalisation mean, std) for a model name, without loading it.

    timm's pretrained config holds them (the in21k ViT and Mixer use mean = std = 0.5);
    tiny test models and unknown names fall back to 32 px / 224 px and ImageNet statistics.
    """
    if name in TINY_VISION:
        return 32, IMAGENET_MEAN, IMAGENET_STD
    import timm

    cfg = None
    with contextlib.suppress(Exception):
        cfg = timm.models.get_pretrained_cfg(name.split(":", 1)[-1])
    p = Path(name.split(":", 1)[-1]).expanduser()
    if cfg is None and (p / "config.json").exists():
        pc = read_config(p / "config.json", "model config").get("pretrained_cfg", {})
        size = pc.get("input_size", [3, 224, 224])[-1]
        return int(size), tuple(pc.get("mean", IMAGENET_MEAN)), tuple(pc.get("std", IMAGENET_STD))
    if cfg is None:
        return 224, IMAGENET_MEAN, IMAGENET_STD
    return int(cfg.input_size[-1]), tuple(cfg.mean), tuple(cfg.std)


def tiny_vision_model(name: str, n_classes: int, img_size: int) -> nn.Module:
    """12-block random-init timm ViT / Mixer, width 48, 8x8 patches grid at any image side."""
    import timm.models.mlp_mixer as mixer
    import timm.models.vision_transformer as vit

    patch = max(1, img_size // 8)
    with fixed_init(0):  # the "pretrained" backbone: the same in every run
        if name == "vit_tiny_test":
            model = vit.VisionTransformer(img_size=img_size, patch_size=patch, num_classes=0, embed_dim=48,
                                          depth=12, num_heads=3, mlp_ratio=2.0, global_pool="avg")
        else:
            model = mixer.MlpMixer(num_classes=0, img_size=img_size, patch_size=patch, num_blocks=12, embed_dim=48)
    model.reset_classifier(n_classes)  # a fresh head from the run's (global, seeded) RNG
    nn.init.trunc_normal_(model.head.weight, std=0.02)
    nn.init.zeros_(model.head.bias)
    return model



def timm_model(name: str, n_classes: int, img_size: int) -> nn.Module:
    """A pretrained timm model with a fresh ``n_classes`` head (download or HF cache)."""
    import timm

    if name in TINY_VISION:
        return tiny_vision_model(name, n_classes, img_size)
    p = Path(name).expanduser()
    kw = {"num_classes": n_classes}
    native, _, _ = vision_defaults(name)
    if img_size != native:
        kw["img_size"] = img_size  # timm resamples the position embedding
    if p.is_dir():
        return timm.create_model(f"local-dir:{p}", pretrained=True, **kw)
    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except Exception:  # noqa: BLE001
        cfg = None
    if not timm.is_model(name.split(".")[0]) and not name.startswith("hf-hub:"):
        raise UserError(f"--model {name}: not a timm model name, alias or local folder "
                        f"(e.g. vit_base_patch16_224.augreg_in21k, mixer_b16_224.goog_in21k, vit_tiny_test)")
    if hub_reachable():
        try:
            return timm.create_model(name, pretrained=True, **kw)
        except OSError as e:
            raise UserError(f"cannot download --model {name}: {str(e).splitlines()[0]}") from None
    weights = _cached_timm_weights(cfg)
    if weights is None:
        hub = getattr(cfg, "hf_hub_id", None) or name
        raise UserError(f"timm model {name!r} is not in the local HF cache and the hub cannot be reached: run "
                        f"`hf download {hub}` on a machine with network and pass --model <that folder>, "
                        f"or use --model vit_tiny_test for a random-init test model")
    return timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": weights}, **kw)


def _cached_timm_weights(cfg) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    hub = getattr(cfg, "hf_hub_id", None)
    if not hub:
        return None
    for fname in ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"):
        path = try_to_load_from_cache(hub, fname)
        if isinstance(path, str):
            return path
    return None


def timm_layout(model: nn.Module) -> tuple[str, dict[str, list[str]]]:
    """(blocks path, target profiles) of a timm ViT or MLP-Mixer."""
    import timm.models.mlp_mixer as mixer
    import timm.models.vision_transformer as vit

    if isinstance(model, vit.VisionTransformer):
        return "blocks", VIT_TARGETS
    if isinstance(model, mixer.MlpMixer):
        return "blocks", MIXER_TARGETS
    raise UserError(f"model class {type(model).__name__} has no layer map here (supported: timm VisionTransformer "
                    f"and MlpMixer families)")


