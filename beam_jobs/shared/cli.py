"""What a job's command line shares: the one-line error (exit 2), logging, the fast exit,
the writable-output check, and reading the summary after a run."""
from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import Optional, Sequence

from apache_beam.io.filesystems import FileSystems

from beam_jobs.shared.errors import JobError, RunFailed
from beam_jobs.shared.publish import remove_tree
from preprocessing import quiet
from preprocessing.accounting.counting import emit
from preprocessing.files.filesys import is_remote_path, pattern_reaching, read_text


def setup_logging(level: str = "WARNING") -> None:
    """Quiet by default: the job's progress lines and summary, warnings and errors. Beam's
    INFO log (and its workers' start-up notices) with --log_level INFO."""
    if quiet.is_verbose() and logging.getLevelName(level) > logging.INFO:
        level = "INFO"  # -v: everything back, Beam's own log included
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root.setLevel(level)
    if not any(isinstance(f, _KnownNoise) for f in root.filters):
        root.addFilter(_KnownNoise())
    # Local multi-process workers forward every notice as a WARNING; keep their errors.
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(
        "ERROR" if logging.getLevelName(level) >= logging.WARNING else level)


def main(job: str, run) -> None:
    """A job's `python -m` entry: logging, `run()`, then the fast exit. A run that failed as
    designed (errors.RunFailed: no rows read, counts that do not reconcile, cut inputs) is
    its one-line message and exit status 1, not a traceback (nor Beam's logged copies of it,
    in-process or forwarded from local worker processes as text)."""
    setup_logging()
    quiet_designed_failures()
    try:
        run()
    except JobError as e:  # a bad argument or input, said before the pipeline: exit 2
        print(e.code, file=sys.stderr)
        exit_now(2)
    except Exception as e:
        message = designed_failure(e)
        if message is None:
            raise
        message = message[len(job) + 1:].strip() if message.startswith(f"{job}:") else message
        print(f"{job}: error: {message}", file=sys.stderr)
        exit_now(1)
    exit_now(0)


def quiet_designed_failures() -> None:
    """Drops Beam's logged copies (with tracebacks) of a designed failure, in this process
    (runner, in-process workers) and in a local worker process."""
    def keep(record) -> bool:
        if record.msg == GIVING_UP:  # the DirectRunner's retries of a failed bundle ran out
            return False
        return designed_failure(record.exc_info[1] if record.exc_info
                                else record.getMessage()) is None
    for name in ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                 "apache_beam.runners.worker.bundle_processor",
                 "apache_beam.runners.portability.local_job_service",
                 "apache_beam.runners.direct.executor"):
        logging.getLogger(name).addFilter(keep)


GIVING_UP = "Giving up after %s attempts."  # apache_beam/runners/direct/executor.py


def designed_failure(error) -> Optional[str]:
    """The message of an errors.RunFailed: the exception itself, or its text inside another
    (a multi-process runner re-raises a worker's failure as a RuntimeError of its traceback)."""
    if isinstance(error, RunFailed):
        text = str(error)
    else:  # the worker's traceback names the class by its module path
        names = "|".join(re.escape(f"{c.__module__}.{c.__name__}")
                         for c in RunFailed.__subclasses__())
        found = re.findall(rf"(?:{names}): ([^\n]*)", str(error or ""))
        if not found:
            return None
        text = found[-1]
    return re.sub(r"\s*\[while running [^\]]*\]\s*$", "", text.strip())


def exit_now(code: int = 0) -> None:
    """Flushes the logs and ends the process at once, skipping the interpreter's teardown.

    With TensorFlow, gRPC and a run's buffers loaded, that teardown takes seconds (figures in
    docs/performance.md) and does nothing a finished job needs: by now every output is
    written, renamed and reported. Used by the
    jobs' command lines after run() returns and by the local worker processes; never by
    run() itself, which tests call in-process.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    quiet.drain()  # the last lines through the stderr filter, before the prompt
    os._exit(code)


class _KnownNoise(logging.Filter):
    """Drops one harmless warning per batch: Beam's RunInference cannot read its memory metric
    when its optional model manager fails to import (it needs torch), and says so each time."""

    def filter(self, record):
        return not str(record.msg).startswith("Resource module is not available")


def check_output_apart(job: str, patterns, output: str) -> None:
    """Refuses an output that an input pattern reaches: the next run would read this run's
    outputs back as input."""
    pattern = pattern_reaching(patterns, output)
    if pattern:
        raise JobError(job, f"--input {pattern} matches files this job writes under --output "
                            f"{output}; put the output outside the input")


def check_writable(job: str, output: str) -> None:
    """Fails fast when the output location cannot be written."""
    probe = FileSystems.join(output, ".write_probe")
    try:
        if not is_remote_path(output):
            os.makedirs(output, exist_ok=True)
        with FileSystems.create(probe) as f:
            f.write(b"ok")
        FileSystems.delete([probe])
    except Exception as e:  # the filesystem's own error text names the cause
        raise JobError(job, f"output {output} is not writable: {str(e).splitlines()[0][:300]}")


def run_and_read_summary(p, template: Optional[str], output: str,
                         cleanup: Sequence[str] = ()) -> Optional[dict]:
    """What a batch job's `run()` does with its built pipeline: run it, then nothing more
    than wait (unless only a template was built) and read the summary its Finalize step
    wrote. When the run fails where this process sees it (e.g. a full disk), the `cleanup`
    folders (its staging, scratch) are removed before the error goes on; a failure Finalize
    sees is cleaned up by Finalize itself, which is all a Flex Template launch has."""
    try:
        result = p.run()
        if template:
            emit(f"Built the job's template at {template}; the job publishes its own outputs.")
            return None
        result.wait_until_finish()
    except BaseException:
        for path in cleanup:
            remove_tree(path)
        raise
    summary = json.loads(read_text(FileSystems.join(output, "summary.json")))
    report = FileSystems.join(output, "report.html")
    if FileSystems.exists(report):
        emit(f"{summary.get('job')}: report {report}")
    return summary
