"""Redrive (beam_jobs/redrive.py): dead letters a user fixed are scored and merged into the
published output by key; what still fails stays a dead letter; the publish is atomic."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from beam_jobs import batch_predict, cli, redrive
from beam_jobs.publish import STAGING_PREFIX
from tests.helpers import ROOT, read_jsonl


@pytest.fixture(scope="module")
def run_with_rejects(trained, tmp_path_factory):
    """10,000 clean rows, 30 of them broken (pickup_longitude 'n/a'), through batch_predict."""
    from tools.datagen import write_csv
    root = tmp_path_factory.mktemp("redrive")
    src = str(root / "rows.csv")
    write_csv(src, 10_000, seed=3, dirty_fraction=0.0)
    with open(src) as f:
        lines = f.read().splitlines()
    header = lines[0].split(",")
    col = header.index("pickup_longitude")
    broken = list(range(1, 10_001, 333))[:30]
    for i in broken:
        fields = lines[i].split(",")
        fields[col] = "n/a"
        lines[i] = ",".join(fields)
    with open(src, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = str(root / "out")
    summary = batch_predict.run(["--model_dir", trained[2]["export_dir"], "--input", src,
                                 "--output", out, "--output_format", "both"])
    assert summary["rows_predicted"] == 9_970 and summary["rejected"]["total"] == 30
    return src, out


def _snapshot(out: str) -> dict:
    files = {}
    for path in glob.glob(os.path.join(out, "**"), recursive=True):
        if os.path.isfile(path) and STAGING_PREFIX not in path:
            with open(path, "rb") as f:
                files[os.path.relpath(path, out)] = hashlib.sha256(f.read()).hexdigest()
    return files


def _fix(out: str, n: int) -> None:
    """Fixes the raw of the first n dead letters, in place."""
    path = glob.glob(os.path.join(out, "rejects", "*.jsonl"))
    records = [r for p in sorted(path) for r in read_jsonl(p)]
    for p in path:
        os.remove(p)
    for r in records[:n]:
        r["raw"] = r["raw"].replace("n/a", "-73.95")
    with open(os.path.join(out, "rejects", "rejects-fixed.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))


def test_a_killed_redrive_leaves_the_output_and_a_redrive_merges_by_key(run_with_rejects):
    _, out = run_with_rejects
    _fix(out, 25)
    before = _snapshot(out)
    proc = subprocess.Popen([sys.executable, "-m", "beam_jobs.redrive", "--output", out],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not glob.glob(os.path.join(out, STAGING_PREFIX + "*")):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # killed while it runs: before any publish
    proc.wait(timeout=30)
    assert _snapshot(out) == before

    summary = redrive.run(["--output", out])
    assert summary["reconciled"] and summary["rows_read"] == 10_000
    assert summary["rows_predicted"] == 9_995
    assert summary["rejected"] == {"total": 5, "by_reason": {"unparsable_number": 5}}
    preds = read_jsonl(os.path.join(out, "predictions-*.jsonl"))
    keys = [p["key"] for p in preds]
    assert len(keys) == len(set(keys)) == 9_995  # no key twice
    csv_rows = sum(len(open(p).read().splitlines()) - 1
                   for p in glob.glob(os.path.join(out, "predictions-*.csv")))
    assert csv_rows == 9_995
    left = read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
    assert len(left) == 5 and all("n/a" in r["raw"] for r in left)
    assert os.path.exists(os.path.join(out, "_SUCCESS"))
    assert summary["previous_run"]["rows_predicted"] == 9_970

    # A fixed copy (--rejects) of one letter, its key one already predicted: it replaces
    # the published letter and becomes a duplicate_key dead letter, not a second row.
    first, fixed = preds[0]["key"], dict(left[0])
    fields = fixed["raw"].replace("n/a", "-73.95").split(",")
    fields[0] = first
    fixed["raw"] = ",".join(fields)
    tmp = os.path.join(os.path.dirname(out), "fixed.jsonl")
    with open(tmp, "w") as f:
        f.write(json.dumps(fixed) + "\n")
    summary = redrive.run(["--output", out, "--rejects", tmp])
    assert summary["rejected"]["by_reason"] == {"duplicate_key": 1, "unparsable_number": 4}
    assert summary["rows_read"] == 10_000 and summary["rows_predicted"] == 9_995
    keys = [p["key"] for p in read_jsonl(os.path.join(out, "predictions-*.jsonl"))]
    assert len(keys) == len(set(keys)) == 9_995

    # A line longer than any letter (a bad hand edit) is read past in bounded pieces and
    # becomes a dead letter of its own; the run goes on and still reconciles.
    # So is a line nested 100,000 deep (past the JSON parser's recursion limit).
    with open(tmp, "w") as f:
        f.write('{"raw": "' + "x" * (redrive.LETTER_MAX_BYTES + 10) + '"}\n')
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    summary = redrive.run(["--output", out, "--rejects", tmp])
    assert summary["reconciled"] and summary["rows_read"] == 10_002
    assert summary["rejected"]["by_reason"] == {"duplicate_key": 1, "invalid_json": 1,
                                                "record_too_large": 1, "unparsable_number": 4}
    [big] = [r for r in read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
             if r["reason"] == "record_too_large"]
    assert len(big["raw"]) < 100_000

    # A device file as --rejects ends at the size it reports, not at the end of the world.
    # (The two letters the last run added are letters of the output now: 10,002 + 1; the
    # unparsable one, with no source, is replayed and stays a letter as redrive_no_header.)
    summary = redrive.run(["--output", out, "--rejects", "/dev/zero"])
    assert summary["reconciled"] and summary["rows_read"] == 10_003
    assert summary["rejected"]["by_reason"] == {
        "duplicate_key": 1, "invalid_json": 1, "record_too_large": 1, "redrive_no_header": 1,
        "unparsable_number": 4}


def test_redrive_refuses_what_is_not_a_published_output(tmp_path):
    with pytest.raises(cli.JobError, match="not a published batch_predict output"):
        redrive.run(["--output", str(tmp_path)])
