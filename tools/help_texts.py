"""Writes (or checks) the stored `--help` text of every entry point
(preprocessing/entry.py): each is its job's live `--help`, at a fixed width.

    python -m tools.help_texts           # rewrite them (after changing a flag)
    python -m tools.help_texts --check   # exit 1 naming each one that differs
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from preprocessing import entry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def modules() -> list:
    return [f"{package}.{name}" for package, names in entry.ENTRY_POINTS.items()
            for name in names]


def live_help(module: str) -> str:
    env = dict(os.environ, COLUMNS=entry.HELP_COLUMNS, **{entry.LIVE_HELP_ENV: "1"})
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{module} --help exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="Compare only; exit 1 on a difference.")
    args = ap.parse_args(argv)
    names = modules()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        texts = dict(zip(names, pool.map(live_help, names)))
    stale = []
    for module, text in texts.items():
        path = entry.help_path(module)
        if args.check:
            if entry.stored_help(module) != text:
                stale.append(module)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {os.path.relpath(path, ROOT)}")
    if stale:
        print(f"stale --help text of {', '.join(stale)}: run python -m tools.help_texts",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
