"""The worker process of local multi-process runs (`--direct_num_workers N
--direct_running_mode multi_processing`): Beam's SDK harness (sdk_worker_main), then an
immediate exit.

A harness process has TensorFlow loaded; tearing down its interpreter takes seconds, and the
runner waits for each worker in turn (figures in docs/performance.md).
When the harness returns, every bundle is done and every file closed: the process leaves
with `cli.exit_now`, keeping the harness's exit status. Only `local_runner.LocalRunner`
starts it; on Dataflow the workers are Dataflow's own.
"""
from __future__ import annotations

import logging
import sys

from beam_jobs.shared import cli


def main() -> None:
    from apache_beam.runners.worker import sdk_worker_main

    code = 0
    cli.quiet_designed_failures()
    try:
        sdk_worker_main.main(sys.argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # the harness has logged it (critical); the status says it failed
        logging.getLogger(__name__).exception("SDK harness failed")
        code = 1
    cli.exit_now(code)


if __name__ == "__main__":
    main()
