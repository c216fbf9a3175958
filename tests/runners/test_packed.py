"""The packed executor gives the local executor's record and uploads.

With LoRA dropout 0 (tiny_text's BERT has no dropout of its own) every uploaded tensor,
private state, loss and cost figure but time is identical in fp32 on CPU: each client's
rows meet exactly its own LoRA and head tensors through the same per-client operations
as sequentially (bmm over equally long batches computes each client's product with the
same kernel as mm here; a shorter last batch takes one linear per client), and only the
frozen base layers run over more rows, which leaves every row's result unchanged.
"""

import numpy as np
import pytest
import torch

from fedbench.runners.experiment import Experiment
from fedbench.runners.summary import PROCESS_MEASURES

from smoke import SMALL_TASK_CONFIGS

# 8 clients of 20 examples at batch 8: batches of 8, 8, 4 (a short last batch), 2 local epochs
NO_DROPOUT = {"lora_dropout": 0.0}
RUN = dict(rounds=2, clients=8, per_round=8, batch_size=8, local_epochs=2, eval_every=1)


class Tee(Experiment):
    """Keeps every client result its executor gives (round, client) -> result."""

    def make_executor(self):
        executor = super().make_executor()
        self.results, inner = {}, executor.execute

        def execute(jobs):
            for job_res in inner(jobs):
                self.results[(len(self.state.logs) + 1, job_res.client)] = job_res
                yield job_res
        executor.execute = execute
        self.executor = executor
        return executor


def run(tmp_path, method, executor, run_cfg=None, method_cfg=None):
    exp = Tee(method, "tiny_text", {**RUN, **(run_cfg or {}), "out": str(tmp_path / executor), "executor": executor},
              method_config=method_cfg or {}, task_config=SMALL_TASK_CONFIGS["tiny_text"])
    rec, _ = exp.run()
    assert rec["status"] == "ok", rec["error"]
    return rec, exp


def same_record(a, b):
    assert a["results"] == b["results"]
    assert {k: v for k, v in a["cost"].items() if k not in PROCESS_MEASURES} == \
        {k: v for k, v in b["cost"].items() if k not in PROCESS_MEASURES}
    assert a["run"]["run_id"] == b["run"]["run_id"]


def same_results(a: Experiment, b: Experiment):
    assert a.results.keys() == b.results.keys()
    for key, ra in a.results.items():
        rb = b.results[key]
        assert ra.upload.keys() == rb.upload.keys() and ra.private.keys() == rb.private.keys()
        for k in ra.upload:
            assert torch.equal(ra.upload[k], rb.upload[k]), (key, k)
        for k in ra.private:
            assert torch.equal(ra.private[k], rb.private[k]), (key, k)
        ca, cb = ra.cost, rb.cost
        for f in ("steps", "train_loss", "first_loss", "flops_forward_step", "flops_backward_step", "flops_total",
                  "first_batch", "accounted_bytes", "breakdown", "n_examples"):
            assert getattr(ca, f) == getattr(cb, f), (key, f)


# method -> whether some of its clients train packed (hetlora's rank regulariser is a
# client loss of its own: its clients run sequentially, still the same record)
METHODS = {"fedavg": True, "fed_hello_fim": True, "fed_hello_rgd": True, "fed_hello_gd_bottleneck": True,
           "straggler": True, "hetlora": False, "flexlora": True, "fedra": True, "inclusivefl": True}


@pytest.mark.parametrize("method", list(METHODS))
def test_packed_gives_the_local_record_and_uploads(tmp_path, method):
    local, exp_l = run(tmp_path, method, "local", method_cfg=NO_DROPOUT)
    packed, exp_p = run(tmp_path, method, "packed", method_cfg=NO_DROPOUT)
    assert packed["run"]["runner"] == "packed"
    same_record(local, packed)
    same_results(exp_l, exp_p)
    placed = exp_p.executor.placement
    assert len(placed["packed"]) + len(placed["sequential"]) == 2 * 8
    assert bool(placed["packed"]) == METHODS[method]
