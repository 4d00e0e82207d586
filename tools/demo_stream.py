"""`make demo-stream`: the streaming job on the real Pub/Sub emulator, with the model `make demo`
trained. It starts the emulator, creates the topics, runs `beam_jobs.stream_predict`, publishes
demo rows (some malformed on purpose) at a steady rate, prints predictions and dead letters as
they arrive with a live count and latency, swaps in a newer model version half way, and stops
everything it started. Exit status 0 when every published message came back once, as a
prediction or a dead letter.

    python -m tools.demo_stream --model_dir demo_output/job/export \\
        --data demo_output/data/taxi.csv --rows 3000 --rate 100
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Dict, List

from tools.pubsub_emulator import EmulatorError, PubSubEmulator, Topics

PROJECT = "demo-project"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every MALFORMED_EVERY-th message is broken on purpose, cycling through these.
MALFORMED = (b"{not json", b"[1, 2, 3]", json.dumps({"pickup_latitude": "north"}).encode(),
             b"\xff\xfe not utf-8")
MALFORMED_EVERY = 40


def messages(path: str, rows: int, label: str) -> List[bytes]:
    """`rows` demo rows as JSON messages (the label dropped), cycling through the file."""
    with open(path, newline="") as f:
        table = [{k: v for k, v in r.items() if k != label}
                 for _, r in zip(range(rows), csv.DictReader(f))]
    if not table:
        raise SystemExit(f"demo_stream: error: no rows in {path}")
    out = []
    for i in range(rows):
        if i % MALFORMED_EVERY == MALFORMED_EVERY - 1:
            out.append(MALFORMED[(i // MALFORMED_EVERY) % len(MALFORMED)])
        else:
            out.append(json.dumps(table[i % len(table)]).encode())
    return out


class Publisher(threading.Thread):
    """Publishes `data` at `rate` messages/s with attribute id=m<i>, recording when each went."""

    def __init__(self, topics: Topics, data: List[bytes], rate: float):
        super().__init__(daemon=True)
        self.topics, self.data, self.rate = topics, data, rate
        self.sent: Dict[str, float] = {}
        self.stop = threading.Event()

    def run(self):
        start = time.time()
        futures = []
        for i, payload in enumerate(self.data):
            if self.stop.is_set():
                break
            wait = start + i / self.rate - time.time()
            if wait > 0:
                time.sleep(wait)
            mid = f"m{i}"
            futures.append(self.topics.pub.publish(self.topics.topics["in"], payload, id=mid))
            self.sent[mid] = time.time()
        for f in futures:
            f.result(timeout=60)


def percentile(values: List[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class Tally:
    """What came back: predictions and dead letters by id, versions, latencies."""

    def __init__(self, show_every: int):
        self.predicted: Dict[str, dict] = {}
        self.dead: Dict[str, dict] = {}
        self.duplicates = 0
        self.versions: Counter = Counter()
        self.reasons: Counter = Counter()
        self.latencies: List[float] = []
        self.show_every = show_every

    def add_prediction(self, rec: dict) -> None:
        if rec["id"] in self.predicted:
            self.duplicates += 1
            return
        self.predicted[rec["id"]] = rec
        self.versions[rec["model_version"]] += 1
        self.latencies.append(rec["latency_ms"])
        if len(self.predicted) % self.show_every == 1:
            print(f"  prediction  id={rec['id']:<6} fare={rec['prediction']:7.2f}  "
                  f"model_version={rec['model_version']}  latency={rec['latency_ms']:.0f} ms",
                  flush=True)

    def add_dead(self, rec: dict) -> None:
        key = rec.get("id") or f"?{len(self.dead)}"
        if key in self.dead:
            self.duplicates += 1
            return
        self.dead[key] = rec
        self.reasons[rec["reason"]] += 1
        print(f"  dead letter id={key:<6} reason={rec['reason']}  "
              f"{str(rec.get('detail', ''))[:70]}", flush=True)

    def status(self, sent: int, elapsed: float) -> str:
        recent = self.latencies[-200:]
        return (f"[{elapsed:5.1f} s] sent {sent:,}  predicted {len(self.predicted):,}  "
                f"dead letters {len(self.dead):,}  latency p50 {percentile(recent, .5):.0f} ms "
                f"p95 {percentile(recent, .95):.0f} ms  versions {dict(self.versions)}")


def publish_version(export: str, base: str, version: str, work: str) -> None:
    """Copies `export` in as `base/version` whole: copied beside, then renamed into place,
    as a trainer should publish (the job never sees a half-copied version)."""
    staging = os.path.join(work, f".staging-{version}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(export, staging)
    os.makedirs(base, exist_ok=True)
    os.rename(staging, os.path.join(base, version))


def start_job(topics: Topics, model_base: str, log_path: str) -> subprocess.Popen:
    log = open(log_path, "w")
    return subprocess.Popen(
        [sys.executable, "-m", "beam_jobs.stream_predict", "--streaming",
         "--model_dir", model_base, "--input_subscription", topics.subs["in"],
         "--output_topic", topics.topics["out"], "--dead_letter_topic", topics.topics["dead"],
         "--monitoring_topic", topics.topics["mon"], "--window_secs", "5",
         "--model_refresh_secs", "2", "--project", PROJECT],
        cwd=ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)


def collect(topics: Topics, tally: Tally) -> None:
    for m in topics.pull_once("out", 500, 1):
        tally.add_prediction(json.loads(m.message.data))
    for m in topics.pull_once("dead", 500, 1):
        tally.add_dead(json.loads(m.message.data))


def warm_up(topics: Topics, proc: subprocess.Popen, tally: Tally, timeout: float,
            log_path: str) -> None:
    """Waits until the job answers one message (start-up loads the model)."""
    topics.publish("in", json.dumps({"warm": "up"}).encode(), id="warmup")
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        collect(topics, tally)
        if "warmup" in tally.dead or "warmup" in tally.predicted:
            tally.dead.pop("warmup", None)
            tally.reasons.clear()
            tally.predicted.pop("warmup", None)
            return
    raise SystemExit("demo_stream: error: the streaming job did not answer within "
                     f"{timeout:.0f} s (its log: {log_path})")


def run_demo(args) -> int:
    data = messages(args.data, args.rows, args.label)
    work = args.work_dir or tempfile.mkdtemp(prefix="demo_stream_")
    base = os.path.join(work, "models")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(work, exist_ok=True)
    publish_version(args.model_dir, base, "1", work)
    log_path = os.path.join(work, "stream_predict.log")
    emulator = proc = publisher = None
    old_host = os.environ.get("PUBSUB_EMULATOR_HOST")
    try:
        emulator = PubSubEmulator()
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
        print(f"Pub/Sub emulator at {emulator.host}; job log {log_path}", flush=True)
        topics = Topics(PROJECT, "demo")
        proc = start_job(topics, base, log_path)
        tally = Tally(args.show_every)
        print("starting stream_predict (model version 1) ...", flush=True)
        warm_up(topics, proc, tally, args.timeout, log_path)
        print(f"publishing {len(data):,} messages at {args.rate:g}/s "
              f"(every {MALFORMED_EVERY}th malformed on purpose)", flush=True)
        publisher = Publisher(topics, data, args.rate)
        started, swapped, last = time.time(), False, 0.0
        publisher.start()
        deadline = started + len(data) / args.rate + args.timeout
        while time.time() < deadline and proc.poll() is None:
            collect(topics, tally)
            if not swapped and len(publisher.sent) >= len(data) // 2:
                publish_version(args.model_dir, base, "2", work)
                print("  >>> model version 2 published to the model base: the job swaps it in "
                      "without a restart", flush=True)
                swapped = True
            if time.time() - last >= 1:
                print(tally.status(len(publisher.sent), time.time() - started), flush=True)
                last = time.time()
            if not publisher.is_alive() and len(tally.predicted) + len(tally.dead) >= len(data):
                break
        publisher.join(timeout=60)
        collect(topics, tally)
        return report(tally, publisher, proc, log_path)
    except EmulatorError as e:
        print(f"demo_stream: error: {e}", file=sys.stderr)
        return 1
    finally:
        if publisher is not None:
            publisher.stop.set()
        if proc is not None and proc.poll() is None:
            import signal
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if emulator is not None:
            emulator.stop()
        if old_host is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = old_host
        shutil.rmtree(base, ignore_errors=True)
        print("stopped the job and the emulator", flush=True)


def report(tally: Tally, publisher: Publisher, proc, log_path: str) -> int:
    sent = set(publisher.sent)
    back = set(tally.predicted) | set(tally.dead)
    missing = sent - back
    print(tally.status(len(sent), 0.0).split("] ", 1)[1])
    print(f"dead letters by reason: {dict(tally.reasons)}")
    print(f"latency over all predictions: p50 {percentile(tally.latencies, .5):.0f} ms, "
          f"p95 {percentile(tally.latencies, .95):.0f} ms, p99 "
          f"{percentile(tally.latencies, .99):.0f} ms")
    print(f"model versions seen: {dict(tally.versions)}")
    if tally.duplicates:
        print(f"{tally.duplicates} duplicate deliveries (the DirectRunner reads Pub/Sub at least "
              "once; Dataflow drops them by --id_attribute)")
    if missing or proc.poll() is not None:
        print(f"NOT reconciled: {len(missing)} of {len(sent)} messages did not come back"
              + ("" if proc.poll() is None else f"; the job exited, see {log_path}"))
        return 1
    print(f"reconciled: {len(sent):,} published = {len(tally.predicted):,} predicted + "
          f"{len(tally.dead):,} dead letters")
    return 0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model_dir", required=True, help="The export `make demo` wrote.")
    ap.add_argument("--data", required=True, help="Demo CSV rows to publish.")
    ap.add_argument("--label", default="fare_amount", help="Column not sent (the label).")
    ap.add_argument("--work_dir", help="Where the model versions and the job's log go "
                    "(default: a new temporary folder).")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=100.0, help="Messages per second.")
    ap.add_argument("--show_every", type=int, default=100,
                    help="Print every Nth prediction (every dead letter is printed).")
    ap.add_argument("--timeout", type=float, default=180.0,
                    help="Seconds to wait for the job to start, and for stragglers.")
    args = ap.parse_args(argv)
    from inference.model.versions import resolve_model_dir
    try:  # an export, or a base of versions (make demo's): its newest complete one
        args.model_dir = resolve_model_dir(args.model_dir)
    except FileNotFoundError:
        raise SystemExit(f"demo_stream: error: no model at {args.model_dir}: run `make demo` "
                         "first") from None
    if args.rows < 2 or args.rate <= 0:
        raise SystemExit("demo_stream: error: need --rows >= 2 and --rate > 0")
    sys.exit(run_demo(args))


if __name__ == "__main__":
    main()
