"""The command line's live view of a run: a progress bar that advances per local step.

The bar counts rounds; each training client owns an equal share of its round, and the
bar moves through that share step by step while the client trains (``local`` executor:
:meth:`~fedbench.runners.outputs.callbacks.Callback.on_client_progress`) and to its end when the
client finishes (every executor), so the ETA is there from the first step on. Its text
says which round, client and step is running and the last score and training loss.
Before it, a line per set-up phase (loading data, building the model, the initial
evaluation) with its time.
"""

from __future__ import annotations

import sys

from fedbench.runners.outputs.callbacks import Callback


class ProgressBar(Callback):
    def __init__(self, label: str):
        self.label = label
        self.bar = None
        self.post: dict[str, str] = {}
        self.share = 0.0  # of the current round, per training client
        self.done = 0  # training clients of the current round that finished
        self.moved = 0.0  # how far the bar moved within the current round

    def on_phase_start(self, name):
        """``label: loading data ...`` on stderr, before the bar: a run says what it does from its
        first second (data, model and the initial evaluation come before round 1)."""
        print(f"{self.label}: {name} ...", end="", file=sys.stderr, flush=True)

    def on_phase_end(self, name, seconds):
        print(f" {seconds:.1f} s", file=sys.stderr, flush=True)

    def on_run_start(self, spec, state):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=spec.run.rounds, initial=state.rounds_done, desc=self.label, unit="round",
                        leave=True, dynamic_ncols=True, bar_format="{l_bar}{bar}| {n:.2f}/{total_fmt} "
                        "[{elapsed}<{remaining}{postfix}]")

    def on_client_start(self, rnd, client, index, total):
        if self.bar is None:
            return
        self.share = 1.0 / max(total, 1)
        self.post["round"] = str(rnd)
        self.post["client"] = f"{index + 1}/{total}"
        self.post.pop("step", None)
        self.bar.set_postfix(self.post, refresh=True)

    def on_client_progress(self, rnd, client, step, steps):
        if self.bar is None:
            return
        self.post["step"] = f"{step}/{steps}"
        self.bar.set_postfix(self.post, refresh=False)  # shown by the update below (tqdm's own pace)
        self.advance((self.done + min(step, steps) / max(steps, 1)) * self.share)

    def on_client_end(self, rnd, cost):
        if self.bar is not None and cost.steps:  # clients that sat the round out have no steps
            self.done += 1
            self.advance(self.done * self.share)

    def advance(self, to: float) -> None:
        """Move the bar forward to ``to`` (a fraction of the current round); never back."""
        step = min(to, 1.0) - self.moved
        if step > 0:
            self.moved += step
            self.bar.update(step)

    def on_round_end(self, log, state):
        if self.bar is None:
            return None
        self.post.pop("client", None)
        self.post.pop("step", None)
        if log.metric is not None:
            self.post["metric"] = f"{log.metric:.4f}"
        if log.train_loss is not None:
            self.post["loss"] = f"{log.train_loss:.3f}"
        self.bar.set_postfix(self.post, refresh=False)
        self.bar.update(1.0 - self.moved)
        self.moved, self.done = 0.0, 0
        return None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


__all__ = ["ProgressBar"]
