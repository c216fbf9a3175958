"""One base model with LoRA (through peft) and named, per-layer adapter tensors.

The local runner keeps exactly one instance of the backbone. What differs between
clients is only a dict of adapter/head tensors, loaded into this model before a client
trains and read back after. Tensor names are *canonical* peft parameter names with the
adapter name removed, e.g. ``blocks.3.attn.proj.lora_A.weight``.

Real freezing: every parameter has ``requires_grad=False`` except the tensors a client
trains, so autograd records nothing (no saved activations, no backward) below the lowest
trainable layer. :meth:`AdapterModel.subset_blocks` swaps the block container for one
holding only the chosen blocks in ascending order (FedRA's physically smaller model):
the skipped blocks cost neither forward nor backward.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

from fedbench.methods.base import EXTRA_PREFIX, ClientProfile, MemoryAPI, MethodContext, ServerAPI, tensor_bytes
from fedbench.tasks.base import PART_NAMES, ModelBundle, get_submodule

DEFAULT_ADAPTER = "default"
_LORA_RE = re.compile(r"\.(lora_[AB])\.([^.]+)\.")


def canonical(name: str) -> tuple[str, str | None]:
    """peft parameter name -> (canonical name, adapter name or None for non-LoRA)."""
    m = _LORA_RE.search(name)
    if not m:
        return name, None
    return name[: m.start()] + f".{m.group(1)}." + name[m.end():], m.group(2)


class AdapterModel:
    """A model with LoRA on the task's target modules, addressed by layer.

    Attributes:
        layer_keys: adapter layer j -> canonical names of its LoRA tensors.
        head_keys: canonical names of the head tensors (trained by every client).
        part_keys: part of ``bundle.parts`` -> canonical names of its base (non-LoRA)
            tensors; empty when the model declares no parts.
    """

    def __init__(self, bundle: ModelBundle, r: int, alpha: float, dropout: float, target_profile: str,
                 device: torch.device | str = "cpu"):
        self.bundle = bundle
        self.model = bundle.model
        self.r, self.alpha, self.dropout = r, alpha, dropout
        self.layer_modules = bundle.layer_map(target_profile)
        self._targets = [n for j in sorted(self.layer_modules) for n in self.layer_modules[j]]
        if self._targets:  # a model without LoRA targets (e.g. a CNN trained whole) has no adapter
            self._inject(DEFAULT_ADAPTER, r, alpha)
        self.model.to(device)
        self.device = torch.device(device)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.active = DEFAULT_ADAPTER
        self._index()
        self.layer_keys = {j: self._keys_under(mods, DEFAULT_ADAPTER) for j, mods in self.layer_modules.items()}
        self.head_keys = [k for m in bundle.head_modules for k in self._keys_under([m], None)]
        parts = bundle.parts
        self.part_keys = {} if parts is None else {n: self._keys_under(parts.modules(n), None) for n in PART_NAMES}
        if not self.head_keys and bundle.head_modules:
            raise ValueError(f"head modules {bundle.head_modules} have no parameters")
        self.extra_keys: list[str] = []  # tensors of modules a method attached (attach_extra)
        blocks = bundle.blocks()
        self._blocks = list(blocks)  # the physical blocks, also while subset_blocks swaps the container
        self.block_bytes = {
            j: tensor_bytes([p for n, p in blocks[j].named_parameters() if "lora_" not in n]) for j in range(len(blocks))
        }

    # -- construction ----------------------------------------------------------------
    def _inject(self, adapter: str, r: int, alpha: float) -> None:
        from peft import LoraConfig, inject_adapter_in_model  # peft on use (start-up stays cheap)

        cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=self.dropout, target_modules=self._targets, bias="none")
        with warnings.catch_warnings():  # one adapter per rank is intended (rank methods): not peft's mistake to warn of
            warnings.filterwarnings("ignore", message="Already found a `peft_config` attribute")
            inject_adapter_in_model(cfg, self.model, adapter_name=adapter)

    def _index(self) -> None:
        # (canonical name, adapter) -> parameter; head/base params have adapter None
        self._params: dict[tuple[str, str | None], nn.Parameter] = {}
        for name, p in self.model.named_parameters():
            self._params[canonical(name)] = p
        self._names = {k for (k, _) in self._params}
        # storages of every parameter (the saved-tensor meter leaves them out), once per model
        self.param_ptrs: frozenset[int] = frozenset(p.untyped_storage().data_ptr() for p in self._params.values())

    def _keys_under(self, modules: Sequence[str], adapter: str | None) -> list[str]:
        prefixes = tuple(m + "." for m in modules)
        return [k for (k, a) in self._params if a == adapter and k.startswith(prefixes)]

    @property
    def all_keys(self) -> list[str]:
        return [k for j in sorted(self.layer_keys) for k in self.layer_keys[j]] + self.head_keys + self.extra_keys

    def attach_extra(self, modules: Mapping[str, nn.Module]) -> list[str]:
        """Add a method's trainable modules under ``fedbench_extra.<name>`` (frozen until
        planned); returns the canonical names of their tensors."""
        if not modules:
            return []
        self.model.add_module(EXTRA_PREFIX, nn.ModuleDict(dict(modules)))
        self.model.to(self.device)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self._index()
        self.extra_keys = [k for (k, a) in self._params if a is None and k.startswith(EXTRA_PREFIX + ".")]
        return list(self.extra_keys)

    def base_keys(self, keys: Iterable[str]) -> list[str]:
        """Those of ``keys`` that name frozen base parameters (not LoRA, head or extra)."""
        own = set(self.head_keys) | set(self.extra_keys)
        return [k for k in keys if (k, None) in self._params and k not in own]

    # -- adapters of other ranks (rank-heterogeneous methods) --------------------------
    def ensure_adapter(self, name: str, r: int, alpha: float | None = None) -> None:
        """Add a LoRA adapter ``name`` of rank ``r`` on the same targets (once).

        Asking again for ``name`` with another rank or alpha is an error: the peft scaling
        alpha / r of an adapter must be what the method assumes on the server.
        """
        from peft.tuners.lora import LoraLayer

        alpha = self.alpha if alpha is None else alpha
        if any(a == name for (_, a) in self._params):
            layer = next(m for m in self.model.modules() if isinstance(m, LoraLayer) and name in m.r)
            if layer.r[name] != r or layer.lora_alpha[name] != alpha:
                raise ValueError(f"adapter {name!r} exists with r={layer.r[name]}, alpha={layer.lora_alpha[name]}; "
                                 f"asked for r={r}, alpha={alpha}")
            return
        self._inject(name, r, alpha)
        self.model.to(self.device)
        self._index()
        self._set_active(self.active)  # injecting may activate the new adapter; keep ours

    @contextlib.contextmanager
    def use_adapter(self, name: str) -> Iterator[None]:
        """Make ``name`` the active LoRA adapter of every LoRA layer inside the block."""
        prev = self.active
        self._set_active(name)
        try:
            yield
        finally:
            self._set_active(prev)

    def _set_active(self, name: str) -> None:
        from peft.tuners.lora import LoraLayer

        for m in self.model.modules():
            if isinstance(m, LoraLayer):
                m.set_adapter(name)  # peft also flips requires_grad on; undo below
        for (k, a), p in self._params.items():
            p.requires_grad_(False)
        self.active = name

    # -- tensors -----------------------------------------------------------------------
    def param(self, key: str, adapter: str | None = None) -> nn.Parameter:
        if (key, None) in self._params:
            return self._params[(key, None)]
        return self._params[(key, adapter or self.active)]

    def read(self, keys: Iterable[str], adapter: str | None = None) -> dict[str, torch.Tensor]:
        return {k: self.param(k, adapter).detach().clone() for k in keys}

    @torch.no_grad()
    def load(self, tensors: Mapping[str, torch.Tensor], adapter: str | None = None) -> None:
        for k, t in tensors.items():
            p = self.param(k, adapter)
            if p.shape != t.shape:
                raise ValueError(f"{k}: payload shape {tuple(t.shape)} != model shape {tuple(p.shape)}")
            p.copy_(t)

    def set_trainable(self, keys: Iterable[str], adapter: str | None = None) -> list[nn.Parameter]:
        """Only ``keys`` require grad afterwards; returns those parameters."""
        for p in self.model.parameters():
            p.requires_grad_(False)
        params = [self.param(k, adapter) for k in keys]
        for p in params:
            p.requires_grad_(True)
        return params

    @contextlib.contextmanager
    def base_overlay(self, tensors: Mapping[str, torch.Tensor]) -> Iterator[None]:
        """Base weights named in ``tensors`` may be loaded inside the block; on exit every
        one of them is restored, so the shared backbone is the pretrained model again
        (a payload that carries base weights, e.g. FLoRA's merged weights, is one client's)."""
        keys = self.base_keys(tensors)
        saved = self.read(keys)
        try:
            yield
        finally:
            self.load(saved)

    @contextlib.contextmanager
    def capture(self, blocks: Sequence[int]) -> Iterator[dict[int, torch.Tensor]]:
        """{physical block j: its output} for ``blocks``, refreshed at every forward."""
        out: dict[int, torch.Tensor] = {}
        handles = []
        for j in blocks:
            def hook(_m, _inp, output, j=j):
                out[j] = output[0] if isinstance(output, (tuple, list)) else output
            handles.append(self._blocks[j].register_forward_hook(hook))
        try:
            yield out
        finally:
            for h in handles:
                h.remove()
            out.clear()

    # -- physically smaller models -----------------------------------------------------
    @contextlib.contextmanager
    def subset_blocks(self, blocks: Sequence[int] | None) -> Iterator[None]:
        """Run the model with only ``blocks`` (ascending) in its block container."""
        if blocks is None or list(blocks) == list(range(self.bundle.n_layers)):
            yield
            return
        path = self.bundle.blocks_path
        parent_path, _, attr = path.rpartition(".")
        parent = get_submodule(self.model, parent_path)
        full = getattr(parent, attr)
        chosen = [full[j] for j in sorted(blocks)]
        smaller = nn.Sequential(*chosen) if isinstance(full, nn.Sequential) else nn.ModuleList(chosen)
        setattr(parent, attr, smaller)
        try:
            yield
        finally:
            setattr(parent, attr, full)

    def physical_blocks(self) -> dict[int, nn.Module]:
        """{j: block j of the full model}, also while :meth:`subset_blocks` swaps the container."""
        return dict(enumerate(self._blocks))

    def n_params_bytes(self) -> int:
        """Bytes of the parameters a client's model holds: every parameter reachable from
        the model (after subsetting) except the LoRA of other adapters than the active one
        (the simulator keeps one adapter per rank; a client holds only its own)."""
        return tensor_bytes([p for n, p in self.model.named_parameters() if canonical(n)[1] in (None, self.active)])

    def has(self, key: str) -> bool:
        """Whether ``key`` names a tensor of this model (any adapter)."""
        return key in self._names


def method_context(am: AdapterModel, profiles: Mapping[int, ClientProfile], rounds: int = 0, task: Any = None,
                   n_classes: int | None = None, data_info: Mapping[str, Any] | None = None,
                   server: ServerAPI | None = None, memory: MemoryAPI | None = None,
                   archs: Sequence[str] = (), build_model: Callable[[str | None], ModelBundle] | None = None
                   ) -> MethodContext:
    """What a method may know (:class:`~fedbench.methods.plans.MethodContext`) of ``am``'s model
    (depth, adapter and head tensors, block bytes, the method's extra modules attached so far,
    the declared parts, LoRA rank and alpha), the task (its kind and head initialisation;
    None: a classification model without a task), the federation and the runner's tools
    (``server``, ``memory``), the task's architectures (``archs``) and ``build_model(arch)`` (a fresh
    model at the data's shape; None: no data): the one builder, used by the worker, the planner and
    the method tests."""
    return MethodContext(
        n_layers=am.bundle.n_layers, layer_keys=am.layer_keys, head_keys=am.head_keys, profiles=dict(profiles),
        lora_r=am.r, lora_alpha=am.alpha, task_kind="classification" if task is None else task.kind, server=server,
        block_bytes=am.block_bytes, rounds=rounds, extra_keys=list(am.extra_keys),
        init_head=None if task is None else task.init_head, n_classes=n_classes, data_info=dict(data_info or {}),
        parts=am.bundle.parts, part_keys=am.part_keys, memory=memory,
        archs=tuple(archs), build_model=build_model)
