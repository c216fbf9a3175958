"""An Experiment that keeps every client result its executor gives (tests that compare
executors or look at what a client uploaded)."""

from fedbench.runners.core.experiment import Experiment


class Tee(Experiment):
    """Keeps every client result its executor gives: ``results[(round, client)]``."""

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
