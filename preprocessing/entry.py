"""What a `python -m` entry point does before its own imports (its package's __init__ runs
`started()`): quiet the terminal (preprocessing/quiet.py), and answer `--help` from the
help text stored beside the module, without importing Beam or TensorFlow.

Importing Apache Beam alone takes seconds on a small machine, and every job's flags are
PipelineOptions classes, so a live `--help` cannot be fast. The stored texts are the live
ones: `python -m tools.help_texts` writes them and tests/test_entry.py fails when one differs
from its job's live `--help` (PIPELINE_LIVE_HELP=1 asks for the live one).
"""
from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from preprocessing import quiet

# The entry points whose --help is stored: package -> modules.
ENTRY_POINTS = {
    "beam_jobs": ("preprocess", "batch_predict", "stream_predict", "redrive"),
    "training": ("task", "tune", "optimize"),
}
HELP_DIR = "help"
HELP_COLUMNS = "100"       # the width the stored texts are written at (argparse reads COLUMNS)
LIVE_HELP_ENV = "PIPELINE_LIVE_HELP"


def started() -> None:
    """Run by an entry package's __init__: when this process is `python -m PACKAGE.MODULE`
    (sys.argv[0] is still "-m" while the package is imported), quiets the terminal and
    answers `-h` / `--help` from the stored text where there is one."""
    if sys.argv[:1] != ["-m"]:
        return
    quiet.install()
    module = running_module(getattr(sys, "orig_argv", ()))
    if module and asks_help(sys.argv[1:]) and os.environ.get(LIVE_HELP_ENV) != "1":
        text = stored_help(module)
        if text is not None:
            sys.stdout.write(text)
            sys.stdout.flush()
            raise SystemExit(0)


def running_module(orig_argv: Sequence[str]) -> Optional[str]:
    """"beam_jobs.batch_predict" of `python -m beam_jobs.batch_predict ...`, else None."""
    args = list(orig_argv)
    for i, arg in enumerate(args[1:-1], start=1):
        if arg == "-m":
            return args[i + 1]
    return None


def asks_help(argv: Sequence[str]) -> bool:
    return any(a in ("-h", "--help") for a in argv)


def help_path(module: str) -> Optional[str]:
    """Where `module`'s stored --help lives (None for a module without one)."""
    package, _, name = module.partition(".")
    if name not in ENTRY_POINTS.get(package, ()):
        return None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, package, HELP_DIR, f"{name}.txt")


def stored_help(module: str) -> Optional[str]:
    path = help_path(module)
    if path is None or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()
