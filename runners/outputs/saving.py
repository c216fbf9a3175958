"""``--save-model``: the final global model, in peft's format, beside the record.

At the end of an ``ok`` run with ``run.save_model`` the experiment writes, beside
``<run_id>.json`` (paths in the record's ``run.saved_model``, relative to its folder):

* ``<run_id>.adapter/``: the evaluated global LoRA and head as a peft adapter
  (``adapter_config.json`` + ``adapter_model.safetensors``), written by
  ``PeftModel.save_pretrained`` of a freshly built base model of the task (``Task.build_model``,
  on the CPU: a second copy of the model while it saves) with the global tensors loaded;
  the head goes in as ``modules_to_save``. ``PeftModel.from_pretrained(base, path)`` on the
  task's base model loads it, and the task's ``evaluate`` then gives the recorded score for
  methods whose evaluation is that model (LoRA + head on every block, the task's forward);
* ``<run_id>.global.safetensors``: the evaluated global tensors the adapter cannot hold
  (a method's extra modules, e.g. DepthFL's exits; base weights the evaluation overrides,
  e.g. FlexLoRA's merged W0 + dW, but not those equal to the pretrained ones; global
  statistics; everything of a model without LoRA targets), canonical names
  (:mod:`fedbench.runners.executors.adapters`); only when there are some;
* ``<run_id>.private/client_<c>.safetensors``: for locally evaluated (personalised) methods,
  each client's private part as its last evaluation used it (a client never sampled has its
  freshly initialised part).

Each is written under a temporary name and renamed into place, so a kill while saving
leaves no half-written file under the final name.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Mapping

import torch

from fedbench.methods.base import ClientPlan, Method
from fedbench.outfiles import check_output, new_temp_dir, replace_dir, write_bytes
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.core.spec import LoraSettings
from fedbench.runners.core.store import ClientStore
from fedbench.runners.executors.worker import ModelPool

#: peft's prefix of the base model's parameters in a saved adapter
PEFT_PREFIX = "base_model.model."


def split_global(tensors: Mapping[str, torch.Tensor], lora_keys: set[str],
                 head_keys: set[str]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(what the peft adapter holds: LoRA and head, everything else) of ``tensors``."""
    adapter = {k: t for k, t in tensors.items() if k in lora_keys or k in head_keys}
    return adapter, {k: t for k, t in tensors.items() if k not in adapter}


def peft_adapter(model: torch.nn.Module, lora: LoraSettings, targets: list[str], head_modules: list[str],
                 tensors: Mapping[str, torch.Tensor]):
    """``model`` (a fresh base model) as a peft model with ``tensors`` (canonical LoRA and head
    names) loaded; checked by reading them back through peft."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                        modules_to_save=list(head_modules) or None, bias="none")
    with warnings.catch_warnings():  # transformers' deprecation notices about peft's calls, not the user's
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = get_peft_model(model, config)
    saved = {PEFT_PREFIX + k: t.detach().cpu() for k, t in tensors.items()}
    set_peft_model_state_dict(peft_model, saved)
    got = get_peft_model_state_dict(peft_model)
    if set(got) != set(saved):
        odd = sorted(set(got) ^ set(saved))
        raise RuntimeError(f"the peft adapter and the global model differ in {len(odd)} tensors, e.g. {odd[0]}")
    bad = [k for k, t in saved.items() if not torch.equal(got[k].cpu(), t.to(got[k].dtype))]
    if bad:
        raise RuntimeError(f"the peft adapter did not take the global value of {bad[0]}")
    return peft_model


def save_tensors(tensors: Mapping[str, torch.Tensor], path: Path, root: Path | None = None) -> None:
    """``tensors`` as a safetensors file at ``path`` (inside ``root``), through the one safe writer."""
    from safetensors.torch import save

    data = save({k: t.detach().cpu().contiguous() for k, t in tensors.items()})
    write_bytes(path, data, root)


def save_model(record_path: Path, pool: ModelPool, method: Method, tensors: Mapping[str, torch.Tensor],
               store: ClientStore, n_clients: int, lora: LoraSettings) -> dict:
    """Write the evaluated global ``tensors`` (``Method.eval_tensors`` of the final state)
    and, for local evaluation, every client's private part beside ``record_path``; returns
    ``run.saved_model`` (paths relative to the record's folder, None where nothing was written)."""
    folder, stem = record_path.parent, record_path.stem
    am: AdapterModel = pool.get()
    every_key = {k for keys in am.layer_keys.values() for k in keys}
    lora_of = {n: {k for k in every_key if k.startswith(n + ".")}
               for j in sorted(am.layer_modules) for n in am.layer_modules[j]}
    # a module goes in the adapter only with all its LoRA factors global (FedSA-LoRA keeps B private:
    # its A factors go to the global file, each client's B to its private file)
    targets = [n for n, keys in lora_of.items() if keys and keys <= tensors.keys()]
    lora_keys = set().union(*(lora_of[n] for n in targets)) if targets else set()
    adapter, rest = split_global(tensors, lora_keys, set(am.head_keys) if targets else set())
    pretrained = am.read(am.base_keys(rest))  # the pool's model holds the pretrained base weights
    rest = {k: t for k, t in rest.items() if k not in pretrained or not torch.equal(t.cpu(), pretrained[k].cpu())}
    out: dict = {"adapter": None, "global": None, "private": None}
    if adapter:
        final = folder / f"{stem}.adapter"
        with torch.random.fork_rng(devices=[]):
            base = pool.task.build_model(pool.data, None).model.cpu()
        heads = [h for h in am.bundle.head_modules if any(k.startswith(h + ".") for k in adapter)]  # a private head
        peft_model = peft_adapter(base, lora, targets, heads, adapter)  # (FedSA-LoRA's) stays out of the adapter
        tmp = new_temp_dir(final, folder)  # checked first: a file or link named like the folder is refused
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                peft_model.save_pretrained(str(tmp))
            replace_dir(tmp, final, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was moved into place
        out["adapter"] = final.name
    if rest:
        save_tensors(rest, folder / f"{stem}.global.safetensors", folder)
        out["global"] = f"{stem}.global.safetensors"
    if method.evaluation == "local":
        check_output(folder / f"{stem}.private", folder, kind="dir")
        out["private"] = {}
        for c in range(n_clients):
            arch = method.client_arch(c)
            private = store.get(c)
            if private is None:
                private = pool.fresh(arch, method.private_keys(ClientPlan(c, 0, (), arch=arch)))
            name = f"{stem}.private/client_{c}.safetensors"
            save_tensors(private, folder / name, folder)
            out["private"][str(c)] = name
    return out


__all__ = ["PEFT_PREFIX", "peft_adapter", "save_model", "save_tensors", "split_global"]
