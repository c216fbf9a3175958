"""The live view: per-step progress from the local executor's worker to callbacks and the bar."""

import io

from tqdm import tqdm

from fedbench.runners.outputs.callbacks import Callback
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.cli.progress import ProgressBar
from fedbench.runners.executors.train import planned_steps

from smoke import SMALL_TASK_CONFIGS


def test_planned_steps_per_phase_epochs_and_cap():
    assert planned_steps(10, 4, [1], None) == 3  # ceil(10 / 4) batches
    assert planned_steps(10, 4, [2, 1], None) == 2 * 3 + 1 * 3
    assert planned_steps(10, 4, [2, 1], 5) == min(5, 2 * 3) + min(5, 1 * 3)
    assert planned_steps(0, 4, [3], None) == 0


class Events(Callback):
    def __init__(self):
        self.events = []

    def on_client_start(self, rnd, client, index, total):
        self.events.append(("start", rnd, client))

    def on_client_progress(self, rnd, client, step, steps):
        self.events.append(("step", rnd, client, step, steps))

    def on_client_end(self, rnd, cost):
        self.events.append(("end", rnd, cost.client, cost.steps))


def test_a_tiny_run_reports_every_local_step_before_the_client_ends(tmp_path):
    ev = Events()
    # 160 examples over 2 clients, batch 16: 5 steps per client and round
    rec, _ = Experiment("fedavg", "tiny_text", {"rounds": 1, "clients": 2, "per_round": 2, "batch_size": 16,
                                                "out": str(tmp_path)},
                        task_config=SMALL_TASK_CONFIGS["tiny_text"], callbacks=[ev]).run()
    assert rec["status"] == "ok"
    first_end = next(i for i, e in enumerate(ev.events) if e[0] == "end")
    start, *steps, end = ev.events[: first_end + 1]
    assert start[0] == "start" and end[0] == "end" and start[2] == end[2]
    n = end[3]
    assert n == 5 and steps == [("step", 1, start[2], s, n) for s in range(1, n + 1)]
    assert sum(e[0] == "step" for e in ev.events) == 2 * 5


def _bar(rounds: int) -> ProgressBar:
    pb = ProgressBar("t")
    pb.bar = tqdm(total=rounds, file=io.StringIO())
    return pb


def test_the_bar_moves_through_each_clients_share_step_by_step():
    pb = _bar(2)
    pb.on_client_start(1, 7, 0, 2)
    pb.on_client_progress(1, 7, 1, 4)
    assert abs(pb.bar.n - (0 + 1 / 4) * (1 / 2)) < 1e-12
    pb.on_client_progress(1, 7, 4, 4)
    pb.on_client_end(1, ClientCost(client=7, tier=0, steps=4))
    assert abs(pb.bar.n - 1 / 2) < 1e-12
    pb.on_client_start(1, 9, 1, 2)
    pb.on_client_progress(1, 9, 2, 4)
    assert abs(pb.bar.n - (1 + 2 / 4) * (1 / 2)) < 1e-12 and pb.post["step"] == "2/4"
    pb.on_client_end(1, ClientCost(client=9, tier=0, steps=4))
    pb.on_round_end(type("Log", (), {"metric": 0.5, "train_loss": 1.0})(), None)
    assert abs(pb.bar.n - 1) < 1e-12 and "step" not in pb.post


def test_without_steps_the_bar_moves_per_finished_client_even_when_jobs_start_ahead():
    pb = _bar(1)  # an executor in other processes: every job handed out before the first result
    for i, c in enumerate((3, 4, 5, 6)):
        pb.on_client_start(1, c, i, 4)
    pb.on_client_end(1, ClientCost(client=2, tier=0, steps=0))  # sat the round out
    pb.on_client_end(1, ClientCost(client=3, tier=0, steps=2))
    assert abs(pb.bar.n - 1 / 4) < 1e-12
