"""The command line's live view of a run: a progress bar that advances per client.

The bar counts rounds; each client that finishes moves it by its share of the round, so
the ETA is there from the first client on. Its text says which round and client is
running and the last score and training loss.
"""

from __future__ import annotations

from fedbench.runners.callbacks import Callback


class ProgressBar(Callback):
    def __init__(self, label: str):
        self.label = label
        self.bar = None
        self.post: dict[str, str] = {}
        self.share = 0.0  # of the current round, per finished client
        self.moved = 0.0  # how far the bar moved within the current round

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
        self.bar.set_postfix(self.post, refresh=True)

    def on_client_end(self, rnd, cost):
        if self.bar is not None and cost.steps:
            step = min(self.share, 1.0 - self.moved)
            self.moved += step
            self.bar.update(step)

    def on_round_end(self, log, state):
        if self.bar is None:
            return None
        self.post.pop("client", None)
        if log.metric is not None:
            self.post["metric"] = f"{log.metric:.4f}"
        if log.train_loss is not None:
            self.post["loss"] = f"{log.train_loss:.3f}"
        self.bar.set_postfix(self.post, refresh=False)
        self.bar.update(1.0 - self.moved)
        self.moved = 0.0
        return None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


__all__ = ["ProgressBar"]
