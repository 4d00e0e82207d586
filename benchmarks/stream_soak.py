"""Soak: stream_predict replayed at a steady rate for a long time, with malformed and hostile
messages mixed in and a model swap in the middle. Prints, per monitoring window, messages in
= predicted + rejected (exact, from the replay's own schedule), the model versions seen,
p50/p99 latency, and the job process's RSS at start and end (flat: no leak).

    python benchmarks/stream_soak.py --model_dir out/job/export --secs 600 --rate 50
    python benchmarks/stream_soak.py --secs 60          # trains a small model first (CI)

The swap publishes a copy of the served export as a newer version under a fresh model base
halfway through; the job must switch to it without a restart and lose nothing.
"""
from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GOOD = {"pickup_datetime": "2025-06-02 08:15:00", "pickup_longitude": -73.95,
        "pickup_latitude": 40.75, "dropoff_longitude": -73.9, "dropoff_latitude": 40.8,
        "passenger_count": 1, "payment_type": "Cash", "company": "Sun Taxi"}
DEEP = '{"a": ' + "[" * 30_000 + "]" * 30_000 + "}"  # under --max_message_bytes below
# Every 10th message is bad, cycling through these (reason the job must give).
BAD = [
    (lambda i: {"data": dict(GOOD, pickup_latitude="x")}, "unparsable_number"),
    (lambda i: {"data_b64": base64.b64encode(b"{oops").decode()}, "invalid_json"),
    (lambda i: {"data_b64": base64.b64encode(DEEP.encode()).decode()}, "invalid_json"),
    (lambda i: {"data": dict(GOOD, company="x" * 70_000)}, "message_too_large"),
    (lambda i: {"data_b64": base64.b64encode(b"\x00\x01garbage").decode()}, "bad_example"),
    (lambda i: {"data": dict(GOOD, pickup_longitude="1e-400")}, "number_out_of_range"),
]


def make_events(path: str, n: int, rate: float, t0: float) -> dict:
    """Writes the replay; returns {window start: messages} for windows of 10 s."""
    per_window = {}
    with open(path, "w") as f:
        for i in range(n):
            when = t0 + i / rate
            ev = {"id": f"m{i}", "event_time": when}
            ev.update(BAD[(i // 10) % len(BAD)][0](i) if i % 10 == 9 else
                      {"data": dict(GOOD, passenger_count=1 + i % 4)})
            f.write(json.dumps(ev) + "\n")
            w = (when // 10) * 10
            per_window[w] = per_window.get(w, 0) + 1
    return per_window


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def small_model(tmp: str) -> str:
    from beam_jobs import preprocess
    from preprocessing import TAXI_SPEC
    from tools.datagen import write_csv
    from training import train_and_evaluate
    from training.config import TrainConfig
    csv_path = os.path.join(tmp, "taxi.csv")
    write_csv(csv_path, 3000, seed=3, dirty_fraction=0.0)
    prep = os.path.join(tmp, "prep")
    preprocess.run(["--input", csv_path, "--output", prep, "--schema_spec", TAXI_SPEC])
    m = train_and_evaluate(TrainConfig(data_dir=prep, job_dir=os.path.join(tmp, "job"),
                                       epochs=1, batch_size=256))
    return m["export_dir"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model_dir", help="an export (or a base of versions); default: train one")
    ap.add_argument("--secs", type=float, default=600)
    ap.add_argument("--rate", type=float, default=50)
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="soak_")
    try:
        from inference.model import versions
        export = versions.resolve_model_dir(a.model_dir) if a.model_dir else small_model(tmp)
        base = os.path.join(tmp, "models")
        shutil.copytree(export, os.path.join(base, "100"))
        n = int(a.secs * a.rate)
        t0 = 1_800_000_000.0
        events = os.path.join(tmp, "events.jsonl")
        expected = make_events(events, n, a.rate, t0)
        out = os.path.join(tmp, "out")
        cmd = [sys.executable, "-m", "beam_jobs.stream_predict", "--streaming",
               "--model_dir", base, "--replay", events, "--replay_rate", str(a.rate),
               "--output_dir", out, "--window_secs", "10", "--model_refresh_secs", "5",
               "--max_message_bytes", "65536"]
        started = time.time()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        samples = []

        def sample():
            while proc.poll() is None:
                samples.append((time.time() - started, rss_mb(proc.pid)))
                time.sleep(2)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # The replay starts after the job's warm-up (TensorFlow import, model load): the first
        # predictions file appears when its first 10 s window closes. The new version is
        # published halfway through the replay from there.
        while proc.poll() is None and not glob.glob(os.path.join(out, "predictions-*")):
            time.sleep(0.5)
        time.sleep(max(0.0, a.secs / 2 - 10))
        shutil.copytree(export, os.path.join(base, "200"))
        swapped = time.time() - started
        err = proc.communicate()[1]
        sampler.join(timeout=5)
        if proc.returncode != 0:
            print(err[-3000:])
            print(f"soak: the job failed (rc {proc.returncode})")
            return 1
        from tools.outputs import read_jsonl
        preds = read_jsonl(os.path.join(out, "predictions-*.jsonl"))
        rejects = read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
        monitoring = read_jsonl(os.path.join(out, "monitoring", "*.jsonl"))
        final = {}
        monitoring = [m for m in monitoring if m["event"] == "window_stats"]
        for m in monitoring:  # accumulating panes: the last pane of a window has its totals
            if m["pane_index"] >= final.get(m["window_start"], {}).get("pane_index", -1):
                final[m["window_start"]] = m
        print(f"{'window':>8} {'in':>6} {'pred':>6} {'rej':>5} {'ok':>3} {'p50 ms':>8} "
              f"{'p99 ms':>8}")
        exact = True
        for w in sorted(expected):
            m = final.get(w, {"predictions": 0, "rejects": 0, "latency_ms": {}})
            ok = expected[w] == m["predictions"] + m["rejects"]
            exact &= ok
            lat = m["latency_ms"]
            print(f"{w - t0:8.0f} {expected[w]:6d} {m['predictions']:6d} {m['rejects']:5d} "
                  f"{'yes' if ok else 'NO':>3} {lat.get('p50') or 0:8.1f} {lat.get('p99') or 0:8.1f}")
        ids = {p["id"] for p in preds} | {r["id"] for r in rejects}
        versions = {}
        for p in preds:
            versions[p["model_version"]] = versions.get(p["model_version"], 0) + 1
        lat = sorted(p["latency_ms"] for p in preds)
        reasons = {}
        for r in rejects:
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
        steady = [r for t, r in samples if t > 0.1 * (samples[-1][0] if samples else 0)]
        print(f"messages {n}: predicted {len(preds)} + rejected {len(rejects)} = "
              f"{len(preds) + len(rejects)}; distinct ids {len(ids)}; every window exact: "
              f"{exact}")
        print(f"rejects by reason: {dict(sorted(reasons.items()))}")
        print(f"model versions seen: {dict(sorted(versions.items()))} (new version published "
              f"at {swapped:.0f} s)")
        if lat:
            print(f"latency ms: p50 {lat[len(lat) // 2]:.1f}, p99 "
                  f"{lat[min(len(lat) - 1, int(len(lat) * 0.99))]:.1f}")
        if steady:
            print(f"job RSS MB: after warm-up {steady[0]:.0f}, end {steady[-1]:.0f}, "
                  f"max {max(steady):.0f}; wall {time.time() - started:.0f} s")
        good = (exact and len(preds) + len(rejects) == n and len(ids) == n
                and set(versions) == {"100", "200"})
        print("soak:", "OK" if good else "FAILED")
        return 0 if good else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
