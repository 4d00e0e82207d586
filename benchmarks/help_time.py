"""How long each entry point's `--help` takes: the stored text (what users get) and the
live parser (PIPELINE_LIVE_HELP=1: Beam's option classes, and TensorFlow where a module
imports it), best of `--repeat` runs each, side by side.

    python benchmarks/help_time.py --repeat 3
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from preprocessing import entry  # noqa: E402
from tools.help_texts import modules  # noqa: E402


def seconds(module: str, live: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env[entry.LIVE_HELP_ENV] = "1" if live else "0"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{'entry point':<26} {'--help (s)':>10} {'live (s)':>9} {'ratio':>6}")
    worst = 0.0
    for module in modules():
        fast = min(seconds(module, False) for _ in range(args.repeat))
        live = min(seconds(module, True) for _ in range(args.repeat))
        worst = max(worst, fast)
        print(f"{module:<26} {fast:>10.2f} {live:>9.2f} {live / fast:>5.0f}x", flush=True)
    print(f"slowest --help: {worst:.2f} s (target < 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
