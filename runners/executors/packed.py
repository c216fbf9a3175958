"""The ``packed`` executor: a round's clients that share a backbone trained in one pass per step.

The round's jobs are read first, then split:

- **packed**: clients whose local training is a plain supervised step (checked from the
  declared hooks and the plan, never from the method's name: :func:`unpackable`) go into
  groups of the same architecture, LoRA adapter (rank, alpha) and lowest trained layer
  (:func:`group_key`: backward stops where it would for each alone); each group of two or
  more trains together (:func:`~fedbench.runners.executors.packed_group.train_group`), on the union of
  its clients' blocks, each block over the rows of the clients that hold it (sub-model
  methods: :mod:`fedbench.runners.executors.packed_rows`);
- **sequential**: every other client (and a group of one) runs through the driver's worker,
  exactly as with ``local``.

With LoRA dropout 0 (and a backbone without dropout) a packed run gives the ``local``
record: every tensor and loss identical in fp32 on CPU (the same per-client ops, the base
layers over more rows; checked by tests/runners/test_packed.py on tiny_text and tiny_vision),
except where a task trims each batch to its longest sequence (``ledgar``): a packed batch
is trimmed to the group's longest, so a client with shorter texts gets extra columns of
attention mask 0, which changes its results only by the order of float sums (last bits:
the MiniLM test there). With LoRA dropout each client's masks come from its own stream
(seeded by its job seed), and a backbone's own dropout (MiniLM's, 0.1) draws over the
packed rows: a valid run of the same method, not the same draws as ``local``. The run's identity leaves the executor out,
as for ``ray``; the record's ``run.runner`` says ``packed``, and its ``run.executor_placement``
(:meth:`PackedExecutor.placement`, also logged every round) says which clients of each round
ran packed and which sequentially (``run.executor_clients``: how many client-rounds each).
"""

from __future__ import annotations

import logging
from typing import Iterable

import numpy as np
import torch
from torch import nn

from fedbench.methods.base import ClientPlan, LocalPhase, Method
from fedbench.runners.executors.executor import EXECUTORS, LocalExecutor
from fedbench.runners.cost.meters import Stopwatch
from fedbench.runners.executors.packed_group import PackedClient, pack_client, train_group
from fedbench.runners.executors.packed_rows import union_blocks
from fedbench.runners.executors.train import adapter_for
from fedbench.runners.executors.worker import ClientJob, ClientResult
from fedbench.tasks.base import ClassificationTask, Task

log = logging.getLogger(__name__)

NORMS_ACROSS_ROWS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def unpackable(method: Method, task: Task, am, plan: ClientPlan, phases: tuple[LocalPhase, ...]) -> str | None:
    """Why ``plan``'s client cannot train in a packed group (None: it can). Packed steps are
    the task's own cross-entropy through the model's forward, one phase training LoRA and
    head tensors, on a model whose rows are independent (no batch norm) and whose LoRA
    layers and heads the router can take over."""
    if not isinstance(task, ClassificationTask) or type(task).loss is not ClassificationTask.loss:
        return "the task's loss is not the classification cross-entropy"
    if type(method).client_loss is not Method.client_loss or type(method).local_loss is not Method.local_loss:
        return "the method's client loss is its own"
    if type(method).client_statistics is not Method.client_statistics:
        return "the method uploads statistics of the trained model"
    if method.hidden_blocks(plan):
        return "the method reads hidden states"
    if len(phases) != 1:
        return f"{len(phases)} local phases"
    lora = {k for keys in am.layer_keys.values() for k in keys}
    if not set(phases[0].trainable) <= lora | set(am.head_keys):
        return "it trains tensors other than LoRA and head"
    if not am.layer_keys or any(not isinstance(am.model.get_submodule(m), nn.Linear) for m in am.bundle.head_modules):
        return "the model has no LoRA or a head that is not a linear layer"
    if any(isinstance(m, NORMS_ACROSS_ROWS) for m in am.model.modules()):
        return "the model has batch norm"
    return None


def lowest_trained(am, trainable: Iterable[str]) -> int:
    """The lowest adapter layer with a tensor in ``trainable`` (n_layers: the head only)."""
    keys = set(trainable)
    return min((j for j, ks in am.layer_keys.items() if keys & set(ks)), default=len(am.layer_keys))


def time_shares(clients: list[PackedClient]) -> list[float]:
    """Each client's share of its group's measured time: its FLOPs over the group's (the
    meter's figures: a client that skips blocks or stops backward higher costs less, as
    alone), or its steps over the group's where a client has no FLOP figure."""
    flops = [c.cost.flops_total for c in clients]
    weights = flops if all(f > 0 for f in flops) else [float(c.cost.steps) for c in clients]
    total = sum(weights)
    return [w / total if total else 0.0 for w in weights]


def gather_rows(device: torch.device) -> bool:
    """Whether clients holding different blocks (sub-model methods) share a group, each
    block run over the rows of the clients that hold it. On CUDA, where a step is mostly
    kernel launches, one pass over gathered rows saves launches; on a CPU a step is mostly
    GEMMs and the gathers' copies cost more than they save (measured, tiny_vision fedra:
    0.74-0.93x of local), so there only clients with the same blocks share a group."""
    return device.type == "cuda"


def group_key(arch: str, adapter: str, lowest: int, blocks: tuple[int, ...] | None, gather: bool) -> tuple:
    """Clients with the same key train together: same model (architecture, adapter), same
    lowest trained layer, and the same blocks unless rows are gathered (:func:`gather_rows`)."""
    return (arch, adapter, lowest) if gather else (arch, adapter, lowest, blocks)


@EXECUTORS.register("packed", "clients sharing a backbone trained in one forward/backward per step "
                              "(others one after another, as local)")
class PackedExecutor(LocalExecutor):
    def __init__(self, worker, worker_spec, data, profiles):
        super().__init__(worker, worker_spec, data, profiles)
        #: round -> client -> "packed" | "sequential", as executed
        self.ran: dict[int, dict[int, str]] = {}

    def placement(self, rnd, clients):
        ran = self.ran.get(rnd, {})
        out: dict[str, list[int]] = {"packed": [], "sequential": []}
        for c in clients:
            out[ran[c]].append(c)
        return out

    def execute(self, jobs):
        jobs = list(jobs)
        worker, method = self.worker, self.worker.method
        task = worker.pool.task
        results: list[ClientResult | None] = [None] * len(jobs)
        groups: dict[tuple, list[tuple[int, ClientJob, str, LocalPhase, dict]]] = {}
        for i, job in enumerate(jobs):
            arch, tensors = worker.job_tensors(job)
            am = worker.pool.get(arch)
            phases = method.local_phases(job.plan)
            adapter = adapter_for(am, job.plan)
            kept = set(method.upload_keys(job.plan)) | set(method.private_keys(job.plan))
            if unpackable(method, task, am, job.plan, phases) is None and not am.base_keys(tensors) \
                    and kept <= set(tensors):
                key = group_key(arch, adapter, lowest_trained(am, phases[0].trainable), job.plan.blocks,
                                gather_rows(am.device))
                groups.setdefault(key, []).append((i, job, adapter, phases[0], tensors))
        packed = {i for members in groups.values() if len(members) >= 2 for i, *_ in members}
        for key, members in groups.items():
            if len(members) >= 2:
                for i, res in self._run_group(key[0], members):
                    results[i] = res
        for i, job in enumerate(jobs):
            if i not in packed:
                results[i] = worker.run(job, self.step_hook(job))
            self.ran.setdefault(job.round, {})[job.plan.client] = "packed" if i in packed else "sequential"
        if jobs:
            log.info("round %d: %d clients packed in %d groups, %d sequential", jobs[0].round, len(packed),
                     sum(1 for m in groups.values() if len(m) >= 2), len(jobs) - len(packed))
        yield from results

    def _run_group(self, arch: str, members) -> list[tuple[int, ClientResult]]:
        worker, method = self.worker, self.worker.method
        am, task = worker.pool.get(arch), worker.pool.task
        physical = list(am.bundle.blocks())  # every block, by index (the group runs the union of its clients')
        blocks = union_blocks([job.plan.blocks for _, job, *_ in members])
        settings = worker.settings
        clients = [pack_client(am, task, worker.pool.data.train, job, tensors, phase, adapter, settings)
                   for _, job, adapter, phase, tensors in members]
        listener = self.listener
        on_step = None if listener is None else \
            (lambda c: listener(c.job.round, c.job.plan.client, c.cost.steps, c.planned))
        heads = list(am.bundle.head_modules)
        device = am.device
        reset = worker.rss.reset()
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(members[0][1].seed)  # any other random draw of the backbone (none in the tests' models)
            with Stopwatch(device) as sw:
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                am.set_trainable([])
                am.model.zero_grad(set_to_none=True)
                am.model.train()
                train_group(am, task, method, clients, settings, worker.meter, arch, heads, physical, on_step)
                am.model.eval()
                peak = None
                if device.type == "cuda":
                    inactive = 0 if blocks is None else sum(
                        b for j, b in am.block_bytes.items() if j not in set(blocks))
                    peak = int(torch.cuda.max_memory_allocated(device)) - inactive
        rss = worker.rss.read() if reset else None
        shares = time_shares(clients)
        out = []
        for (i, job, *_), c, share in zip(members, clients, shares):
            out.append((i, self._result(c, sw.seconds * share, peak, rss)))
        return out

    def _result(self, c: PackedClient, seconds: float, peak: int | None, rss: int | None) -> ClientResult:
        method, plan = self.worker.method, c.job.plan
        cost = c.cost
        cost.seconds, cost.cuda_peak_bytes, cost.rss_peak_bytes = seconds, peak, rss
        cost.train_loss = float(np.mean(c.losses)) if c.losses else None
        cost.first_loss = c.losses[0] if c.losses else None
        upload = {k: c.tensors[k].detach().clone() for k in method.upload_keys(plan)}
        private = {k: c.tensors[k].detach().clone() for k in method.private_keys(plan)}
        return ClientResult(plan.client, upload, private, cost)
