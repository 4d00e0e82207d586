"""Reading the jobs' JSON-lines outputs back (predictions, dead letters, monitoring records),
for the tests and the benchmarks alike."""
from __future__ import annotations

import glob
import json


def read_jsonl(pattern: str) -> list:
    """Every record of the JSON-lines files matching a local glob, in file-name order."""
    rows = []
    for f in sorted(glob.glob(pattern)):
        with open(f) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows
