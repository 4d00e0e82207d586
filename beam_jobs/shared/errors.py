"""The errors a job ends with, one line each: a bad argument or input found before the
pipeline starts (`JobError`, exit 2) and a run that failed as designed (`RunFailed` and its
kinds, raised by the Finalize step inside the pipeline; exit 1)."""


class JobError(SystemExit):
    """A bad argument or input found before the pipeline starts: one line, exit status 2."""

    def __init__(self, job: str, message: str):
        super().__init__(f"{job}: error: {message}")
        self.job = job
        self.message = message


class RunFailed(RuntimeError):
    """A run that failed as designed (the pipeline's Finalize said why): the command line
    prints its message as one line (exit 1), not a traceback."""


class NotReconciled(RunFailed):
    """Rows read != rows written + rows rejected: the run is not published."""


class PartialInput(RunFailed):
    """An input file was cut short, corrupt or unreadable: what was read is published, without _SUCCESS,
    and the job fails, so no schedule takes it for a complete run."""


class NotPublished(RunFailed):
    """Another run held the output's publish lock for longer than a run waits."""


class EmptyOutput(RunFailed):
    """No rows were read, or an output the job cannot do without (preprocess's train split)
    got none: nothing is published, the previous output stays."""
