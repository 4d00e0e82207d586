"""Streaming prediction on the real Pub/Sub emulator: a rate sweep and a soak.

The job runs as a user runs it before Dataflow (`python -m beam_jobs.stream_predict
--streaming --input_subscription ...`, the local runner it configures), reading JSON rows
published at a steady rate (every 40th malformed on purpose). Per rate (default 100, 250,
500, 1,000, 2,000 msg/s for 30 s each) and per configuration (`lean`: --model_gate off
--skew_report off; `default`: the job's default flags, gate and skew report on; `all`: the
defaults plus a shadow model): the sustained rate (messages back / time from the first
publish to the last arrival), p50/p99 latency from publish to arrival on the output or
dead-letter topic, and messages lost or duplicated (must be 0). Then a soak at --soak_rate for
--soak_secs with the default flags: per minute p50/p99 and the job's RSS, first vs last.

    python benchmarks/stream_pubsub.py [--model_dir EXPORT] [--rates 100,1000] [--secs 30]
        [--configs lean,default,all] [--soak_secs 600 --soak_rate 1000]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stream_soak import rss_mb, small_model  # noqa: E402

from tools.demo_stream import messages, percentile  # noqa: E402
from tools.pubsub_emulator import PubSubEmulator, Topics  # noqa: E402

PROJECT = "bench-project"
CONFIGS = {"lean": ["--model_gate", "off", "--skew_report", "off"], "default": [],
           "all": ["--shadow_model_dir", "{model}"]}


class Collector(threading.Thread):
    """Pulls the output and dead-letter subscriptions, noting when each id arrived: a thread
    per subscription (one loop over both waited up to a second on the mostly empty dead
    letters before each pull of the predictions, and that wait was counted as latency)."""

    def __init__(self, topics: Topics):
        super().__init__(daemon=True)
        self.topics = topics
        self.arrived: Dict[str, float] = {}
        self.formatted: Dict[str, float] = {}  # id -> the job's latency_ms: publish -> its record
        self.duplicates = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def run(self):
        pullers = [threading.Thread(target=self._pull, args=(name,), daemon=True)
                   for name in ("out", "dead")]
        for t in pullers:
            t.start()
        for t in pullers:
            t.join()

    def _pull(self, name: str):
        while not self.stop.is_set():
            got = self.topics.pull_once(name, 1000, 1)
            now = time.time()
            with self._lock:
                for m in got:
                    rec = json.loads(m.message.data)
                    mid = rec.get("id") or m.message.attributes.get("id")
                    if mid in self.arrived:
                        self.duplicates += 1
                    else:
                        self.arrived[mid] = now
                        if rec.get("latency_ms") is not None:
                            self.formatted[mid] = rec["latency_ms"]
            if not got:
                time.sleep(0.02)


def publish(topics: Topics, data: List[bytes], rate: float, secs: float, tag: str) -> dict:
    """Publishes rate*secs messages at `rate`; returns id -> publish time."""
    sent, futures, start = {}, [], time.time()
    for i in range(int(rate * secs)):
        wait = start + i / rate - time.time()
        if wait > 0:
            time.sleep(wait)
        mid = f"{tag}-{i}"
        futures.append(topics.pub.publish(topics.topics["in"], data[i % len(data)], id=mid))
        sent[mid] = time.time()
    for f in futures:
        f.result(timeout=120)
    return sent


def measure(sent: dict, collector: Collector, drain_secs: float) -> dict:
    deadline = time.time() + drain_secs
    while time.time() < deadline and any(m not in collector.arrived for m in sent):
        time.sleep(0.2)
    back = {m: collector.arrived[m] for m in sent if m in collector.arrived}
    lat = [(back[m] - sent[m]) * 1000 for m in back]
    span = (max(back.values()) - min(sent.values())) if back else float("nan")
    made = [collector.formatted[m] for m in back if m in collector.formatted]
    return {"sent": len(sent), "back": len(back), "late": len(sent) - len(back),
            "sustained": round(len(back) / span, 1) if back else 0.0,
            "p50_ms": round(percentile(lat, .5)), "p99_ms": round(percentile(lat, .99)),
            # Where the time goes: publish -> the record made in the job (FormatResults),
            # the rest is the sink's publish and the consumer's pull.
            "made_p50_ms": round(percentile(made, .5)) if made else None,
            "made_p99_ms": round(percentile(made, .99)) if made else None}


class Job:
    def __init__(self, topics: Topics, model_base: str, extra: List[str], log_path: str):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "beam_jobs.stream_predict", "--streaming",
             "--model_dir", model_base, "--input_subscription", topics.subs["in"],
             "--output_topic", topics.topics["out"], "--dead_letter_topic",
             topics.topics["dead"], "--project", PROJECT, *extra],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def warm_up(self, topics: Topics, collector: Collector, timeout: float = 180):
        topics.publish("in", b"{}", id="warmup")
        end = time.time() + timeout
        while "warmup" not in collector.arrived:
            if time.time() > end or self.proc.poll() is not None:
                raise SystemExit(f"the job did not answer (log: {self.log.name})")
            time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def run_config(name: str, model_base: str, data, rates, secs, work) -> list:
    topics = Topics(PROJECT, f"b{name}{int(time.time())}")
    collector = Collector(topics)
    collector.start()
    extra = [a.replace("{model}", model_base) for a in CONFIGS[name]]
    job = Job(topics, model_base, extra, os.path.join(work, f"job_{name}.log"))
    rows, everything = [], {}
    try:
        job.warm_up(topics, collector)
        for rate in rates:
            sent = publish(topics, data, rate, secs, f"{name}{rate}")
            everything.update(sent)
            r = measure(sent, collector, drain_secs=max(30.0, secs))
            r.update(config=name, rate=rate, duplicates=collector.duplicates)
            rows.append(r)
            print(f"{name:8} {rate:>6} msg/s: sustained {r['sustained']:>7} msg/s  p50 "
                  f"{r['p50_ms']:>6} ms  p99 {r['p99_ms']:>6} ms  (record made: p50 "
                  f"{r['made_p50_ms']} p99 {r['made_p99_ms']} ms)  not back within "
                  f"{max(30.0, secs):.0f} s {r['late']}  duplicates {r['duplicates']}",
                  flush=True)
            if r["late"]:
                break  # past the ceiling: the backlog would spill into the next rate
        final = measure(everything, collector, drain_secs=300)  # nothing lost, only late?
        print(f"{name:8} all rates: {final['sent']:,} sent, {final['back']:,} back, lost "
              f"{final['late']}, duplicates {collector.duplicates}", flush=True)
        rows.append(dict(final, config=name, rate="all", duplicates=collector.duplicates))
    finally:
        job.stop()
        collector.stop.set()
    return rows


def soak(model_base: str, data, rate: float, secs: float, work: str) -> dict:
    topics = Topics(PROJECT, f"bsoak{int(time.time())}")
    collector = Collector(topics)
    collector.start()
    job = Job(topics, model_base, [], os.path.join(work, "job_soak.log"))
    minutes = []
    try:
        job.warm_up(topics, collector)
        for minute in range(max(1, int(secs // 60))):
            sent = publish(topics, data, rate, min(60.0, secs), f"soak{minute}")
            r = measure(sent, collector, drain_secs=5)
            r.update(minute=minute + 1, rss_mb=round(rss_mb(job.proc.pid)))
            minutes.append(r)
            print(f"soak minute {minute + 1}: sustained {r['sustained']} msg/s  p50 "
                  f"{r['p50_ms']} ms  p99 {r['p99_ms']} ms  rss {r['rss_mb']} MB  not back "
                  f"within 5 s {r['late']}", flush=True)
        time.sleep(10)
        lost = sum(1 for m in range(len(minutes)) for i in range(int(rate * min(60.0, secs)))
                   if f"soak{m}-{i}" not in collector.arrived)
    finally:
        job.stop()
        collector.stop.set()
    return {"minutes": minutes, "lost": lost, "duplicates": collector.duplicates}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model_dir", help="An export (default: a small model trained here).")
    ap.add_argument("--rates", default="100,250,500,1000,2000")
    ap.add_argument("--secs", type=float, default=30)
    ap.add_argument("--configs", default="lean,default,all", help="'' for none.")
    ap.add_argument("--soak_secs", type=float, default=600)
    ap.add_argument("--soak_rate", type=float, default=1000)
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench_stream_pubsub_")
    model = a.model_dir or small_model(work)
    base = os.path.join(work, "models")
    shutil.copytree(model, os.path.join(base, "1"))
    from tools.datagen import write_csv
    write_csv(os.path.join(work, "rows.csv"), 5000, seed=5, dirty_fraction=0.0)
    data = messages(os.path.join(work, "rows.csv"), 5000, "fare_amount")
    emulator = PubSubEmulator()
    os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
    results = {"rates": [], "soak": None}
    try:
        for name in filter(None, a.configs.split(",")):
            results["rates"] += run_config(name, base, data,
                                           [float(r) for r in a.rates.split(",")], a.secs, work)
        if a.soak_secs:
            results["soak"] = s = soak(base, data, a.soak_rate, a.soak_secs, work)
            first, last = s["minutes"][0], s["minutes"][-1]
            print(f"soak {a.soak_rate:g} msg/s for {a.soak_secs:g} s: first minute p50 "
                  f"{first['p50_ms']} / p99 {first['p99_ms']} ms, rss {first['rss_mb']} MB; "
                  f"last minute p50 {last['p50_ms']} / p99 {last['p99_ms']} ms, rss "
                  f"{last['rss_mb']} MB; lost {s['lost']}, duplicates {s['duplicates']}")
    finally:
        emulator.stop()
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(f"results: {work}/results.json")


if __name__ == "__main__":
    main()
