"""Peak memory of `--refit_on_eval`'s golden-row matching as the eval split grows.

training/exporting/golden_rows.py leaves the golden set's rows out of the eval rows the
model exported learns, matching and writing the eval split a batch at a time. This runs
`eval_less_golden` on a preprocess output's eval split listed 1, 10, 40 ... times (each
golden row then matches that many eval rows), each in a fresh process, and prints its peak
RSS beside the first's: flat when memory holds the golden set and not the eval split.

    python -m beam_jobs.preprocess ... --output_dir PREP     # or `make demo`'s demo_output/prep
    python benchmarks/golden_rows_memory.py --data_dir PREP --repeats 1,10,40
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = """
import json, os, resource, shutil, sys, time
sys.path.insert(0, {root!r})
from training import data as data_lib
from training.exporting import golden_rows
info = data_lib.load_feature_info({data_dir!r})
files = data_lib.split_files({data_dir!r}, "eval") * {repeats}
started = time.time()
out, rows, why = golden_rows.eval_less_golden({data_dir!r}, info, files)
seconds = time.time() - started
if out and out != files:
    shutil.rmtree(os.path.dirname(out[0]))
print(json.dumps(dict(rows=rows, why=why, seconds=seconds,
                      peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
"""


def measure(data_dir: str, repeats: int) -> dict:
    """One fresh process's figures for the eval split listed `repeats` times."""
    code = _CHILD.format(root=ROOT, data_dir=os.path.abspath(data_dir), repeats=repeats)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    if done.returncode:
        raise SystemExit(f"repeats={repeats} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data_dir", required=True, help="a preprocess output with a golden set")
    ap.add_argument("--repeats", default="1,10,40")
    args = ap.parse_args(argv)
    repeats = [int(r) for r in args.repeats.split(",")]
    if not os.path.isdir(os.path.join(args.data_dir, "golden")):
        ap.error(f"{args.data_dir} has no golden/ folder: preprocess with --golden_rows > 0")
    print(f"{'eval rows listed':>16} {'rows added':>11} {'seconds':>8} {'peak MiB':>9} "
          f"{'x first':>8}")
    first = None
    for r in repeats:
        m = measure(args.data_dir, r)
        first = first or m["peak_mib"]
        print(f"{r:>15}x {m['rows']:>11,} {m['seconds']:>8.1f} {m['peak_mib']:>9.0f} "
              f"{m['peak_mib'] / first:>8.2f}")
        print(f"{'':>17}{m['why'][:70]}")


if __name__ == "__main__":
    main()
