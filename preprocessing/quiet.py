"""A quiet terminal: an entry point shows its own progress, results and warnings, not
TensorFlow's, absl's or the forests' C++ log lines, unless asked for (`-v` or
`--verbosity debug`).

`TF_CPP_MIN_LOG_LEVEL` is not enough: TensorFlow 2.21 writes its CUDA probe (cudart_stub,
cuInit) through absl before absl's log is initialised, and the forests' inference ops
(ydf-tf) carry their own absl, which writes every INFO line. So the process's stderr (file
descriptor 2) becomes a pipe into a small filter process that drops C++ log lines and copies
every other line to the real stderr. Being a process of its own, the filter still copies
what a crash writes last. The processes a job starts inherit the pipe and the choice
(QUIET_ENV): local Beam workers, training workers.

Entry points install it before anything imports TensorFlow (preprocessing/entry.py).
"""
from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import subprocess
import sys
from typing import Optional, Sequence

from preprocessing import flags

QUIET_ENV = "PIPELINE_VERBOSITY"
FILTERED_ENV = "PIPELINE_STDERR_FILTERED"  # set where fd 2 already goes through a filter
VERBOSITIES = ("quiet", "debug")
# A C++ log line (absl's format, TensorFlow's older one) and absl's notice before its first.
CPP_LINE = (rb"^([IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./+-]+:\d+\] |"
            rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] [\w./+-]+:\d+\] |"
            rb"WARNING: All log messages before absl::InitializeLog\(\) is called|"
            rb"To enable the following instructions: )")
_FILTER = (f"import re, sys\ndrop = re.compile({CPP_LINE!r})\n"
           "out = sys.stdout.buffer\n"
           "for line in sys.stdin.buffer:\n"
           "    if not drop.match(line):\n"
           "        out.write(line)\n"
           "        out.flush()\n")
# Python loggers whose INFO and warnings are about their own internals (tf.transform's
# analyzer cache keys through absl, TensorFlow's retracing), not the user's data or flags.
NOISY_LOGGERS = {"absl": logging.ERROR, "tensorflow": logging.ERROR}
_filter: Optional[subprocess.Popen] = None
_real_stderr: Optional[int] = None


def verbosity_of(argv: Sequence[str]) -> Optional[str]:
    """"debug" for `-v` or `--verbosity debug`, the value of `--verbosity`, else
    None (not said)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == "-v":
            found = "debug"
        elif arg == "--verbosity" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--verbosity="):
            found = arg.split("=", 1)[1]
    return found


def is_verbose() -> bool:
    return os.environ.get(QUIET_ENV) == "debug"


def install(argv: Optional[Sequence[str]] = None) -> bool:
    """Quiets TensorFlow's, absl's and the forests' lines for this process and the processes
    it starts, unless argv or QUIET_ENV asks for everything. Returns whether it quieted."""
    said = verbosity_of(sys.argv[1:] if argv is None else argv)
    if said in VERBOSITIES:
        os.environ[QUIET_ENV] = said
    if is_verbose():
        return False
    os.environ.setdefault(QUIET_ENV, "quiet")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for name, level in NOISY_LOGGERS.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not any(isinstance(f, _AtLeast) for f in logger.filters):
            logger.addFilter(_AtLeast(level))  # a library that sets the level back is overruled
    if os.environ.get(FILTERED_ENV) != "1":
        _filter_stderr()
    return True


class _AtLeast(logging.Filter):
    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record) -> bool:
        return record.levelno >= self.level


def _filter_stderr() -> None:
    global _filter, _real_stderr
    try:
        real = os.dup(2)
        proc = subprocess.Popen([sys.executable, "-I", "-c", _FILTER], stdin=subprocess.PIPE,
                                stdout=real, stderr=real, start_new_session=True)
    except OSError:  # no fd 2, no process: the lines stay as they were
        return
    sys.stderr.flush()
    os.dup2(proc.stdin.fileno(), 2)
    proc.stdin.close()
    _filter, _real_stderr = proc, real
    os.environ[FILTERED_ENV] = "1"
    atexit.register(drain)


def drain(timeout: float = 2.0) -> None:
    """Gives fd 2 back to the real stderr and waits (at most `timeout` s) for the filter to
    copy what it holds: before a process ends, so that its last lines come before the
    shell's prompt. Processes it started that still write keep the pipe open."""
    global _filter
    if _filter is None:
        return
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(_real_stderr, 2)
    try:
        _filter.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    _filter = None


def verbosity_flag():
    """The `-v` / `--verbosity quiet|debug` field of an entry point's flags dataclass: every
    entry point's one declaration of it (install() reads argv before any parser runs)."""
    return flags.flag("quiet", aliases=("-v",), nargs="?", const="debug", choices=VERBOSITIES,
                      help="quiet (default): the job's own lines; debug (or -v alone): "
                           "TensorFlow's, absl's and the libraries' log lines too.")


@dataclasses.dataclass(frozen=True)
class VerbosityArgs:
    verbosity: str = verbosity_flag()


def add_verbosity_flag(parser) -> None:
    """The verbosity flag alone, on a parser whose other flags are not a dataclass's."""
    flags.add_arguments(parser, VerbosityArgs)
