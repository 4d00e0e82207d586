"""The faults round (issue 59): the streaming job on the real Pub/Sub emulator killed,
restarted and starved of its topics; the tuner, the trainer and the Dataflow launch given
hostile specs and mistakes. Each case is ok or not ok, with what was measured.

    python -m tools.reliability_faults               # every case (~6 min on 2 cores)
    python -m tools.reliability_faults --kills 8     # more kill -9 rounds in the soak

ok means: streaming, every message published came out at least once (as a prediction or
a dead letter; duplicates are counted, never lost) and a stop was one line naming its
cause; elsewhere, a one-line refusal (exit 2, or the job's own error line) within the time
and memory bounds, or the capped behaviour the case asks for.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = "faults-project"
GOOD = {"pickup_datetime": "2025-06-02 08:15:00", "pickup_longitude": -73.95,
        "pickup_latitude": 40.75, "dropoff_longitude": -73.9, "dropoff_latitude": 40.8,
        "passenger_count": 1, "payment_type": "Cash", "company": "Sun Taxi"}
EPOCHS = {"epochs": {"type": "integer", "min": 1, "max": 3}}


def train_model(work: str) -> str:
    """A small taxi export (the streaming cases' model)."""
    from tools.datagen import write_csv
    csv = os.path.join(work, "taxi.csv")
    write_csv(csv, 2000, seed=3, dirty_fraction=0.0)
    for module, args in (("beam_jobs.preprocess", ["--input", csv, "--output", f"{work}/prep",
                                                   "--schema_spec",
                                                   "preprocessing/specs/taxi.yaml"]),
                         ("training.task", ["--data_dir", f"{work}/prep", "--job_dir",
                                            f"{work}/job", "--model", "wide_deep",
                                            "--epochs", "1", "--verbose", "0"])):
        subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, check=True,
                       capture_output=True)
    base = os.path.join(work, "models")
    import shutil
    shutil.copytree(os.path.join(work, "job", "export"), base)
    return base


# ---- streaming ------------------------------------------------------------------------------
def start_job(topics, model: str, *extra) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "beam_jobs.stream_predict", "--streaming", "--model_dir", model,
         "--input_subscription", topics.subs["in"], "--output_topic", topics.topics["out"],
         "--dead_letter_topic", topics.topics["dead"], "--window_secs", "5",
         "--project", PROJECT, *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


class Publisher(threading.Thread):
    def __init__(self, topics, prefix: str, rate: float):
        super().__init__(daemon=True)
        self.topics, self.prefix, self.rate = topics, prefix, rate
        self.sent, self.halt = [], threading.Event()

    def run(self):
        i, data = 0, json.dumps(GOOD).encode()
        while not self.halt.is_set():
            started = time.monotonic()
            batch = [(f"{self.prefix}{i + k}", self.topics.pub.publish(
                self.topics.topics["in"], data, id=f"{self.prefix}{i + k}")) for k in range(20)]
            for mid, future in batch:
                future.result(timeout=60)
                self.sent.append(mid)
            i += 20
            time.sleep(max(0.0, 20 / self.rate - (time.monotonic() - started)))

    def stop(self):
        self.halt.set()
        self.join(timeout=60)


def collect(topics, seen: list, want: set, timeout: float) -> None:
    deadline = time.time() + timeout
    while not want <= set(seen) and time.time() < deadline:
        for name in ("out", "dead"):
            seen.extend(m.message.attributes["id"] for m in topics.pull_once(name, 1000, 2))


def drain(topics, seen: list, quiet_secs: float = 5) -> None:
    """Pulls until nothing came for `quiet_secs`."""
    last = time.time()
    while time.time() - last < quiet_secs:
        for name in ("out", "dead"):
            got = topics.pull_once(name, 1000, 1)
            if got:
                last = time.time()
            seen.extend(m.message.attributes["id"] for m in got)


def stop(proc) -> str:
    if proc.poll() is None:
        proc.kill()
    return proc.communicate(timeout=60)[1]


def case_kill_soak(model, kills: int, rate: float):
    from tools.pubsub_emulator import Topics
    topics = Topics(PROJECT, f"soak{int(time.time())}")
    publisher = Publisher(topics, "k", rate)
    publisher.start()
    seen: list = []
    for _ in range(kills):
        proc = start_job(topics, model)
        time.sleep(random.uniform(20, 30))  # start-up, then messages in flight
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        drain(topics, seen, quiet_secs=1)
    proc = start_job(topics, model)
    time.sleep(10)
    publisher.stop()
    collect(topics, seen, set(publisher.sent), timeout=300)
    drain(topics, seen)
    stop(proc)
    lost = set(publisher.sent) - set(seen)
    return not lost, (f"{kills} kills at {rate:g} msg/s: {len(publisher.sent):,} published, "
                      f"{len(lost)} lost, {len(seen) - len(set(seen))} duplicates")


def case_deleted_topic(model):
    from tools.pubsub_emulator import Topics
    topics = Topics(PROJECT, f"del{int(time.time())}")
    proc = start_job(topics, model, "--max_outage_secs", "10")
    ids = [f"d{i}" for i in range(200)]
    for mid in ids[:100]:
        topics.publish("in", json.dumps(GOOD).encode(), id=mid)
    seen: list = []
    collect(topics, seen, set(ids[:100]), timeout=180)
    topics.pub.delete_topic(topic=topics.topics["out"])
    for mid in ids[100:]:
        topics.publish("in", json.dumps(GOOD).encode(), id=mid)
    try:
        err = proc.communicate(timeout=240)[1]
    except subprocess.TimeoutExpired:
        return False, "did not stop within 240 s " + stop(proc)[-300:]
    last = err.strip().splitlines()[-1] if err.strip() else ""
    code = proc.returncode
    one_line = code == 1 and "Traceback" not in err and \
        last.startswith("stream_predict: error: cannot publish to")
    topics.pub.create_topic(name=topics.topics["out"])
    topics.subs["out"] += "-again"
    topics.sub.create_subscription(name=topics.subs["out"], topic=topics.topics["out"])
    proc = start_job(topics, model)
    collect(topics, seen, set(ids), timeout=240)
    stop(proc)
    lost = set(ids) - set(seen)
    return one_line and not lost, (f"exit {code}: {last[:110]}...; after the topic "
                                   f"came back {len(ids) - len(lost)}/{len(ids)} out")


def case_emulator_restart(model, emulator):
    from tools.pubsub_emulator import PubSubEmulator, Topics
    topics = Topics(PROJECT, "restart")
    proc = start_job(topics, model)
    seen: list = []
    for i in range(20):
        topics.publish("in", json.dumps(GOOD).encode(), id=f"a{i}")
    collect(topics, seen, {f"a{i}" for i in range(20)}, timeout=180)
    port = emulator.port
    emulator.proc.send_signal(signal.SIGKILL)
    emulator.stop()
    time.sleep(5)
    emulator = PubSubEmulator(port=port)
    topics = Topics(PROJECT, "restart")
    for i in range(20):
        topics.publish("in", json.dumps(GOOD).encode(), id=f"b{i}")
    collect(topics, seen, {f"b{i}" for i in range(20)}, timeout=180)
    alive = proc.poll() is None
    err = stop(proc)
    got = len({f"b{i}" for i in range(20)} & set(seen))
    return (alive and got == 20, f"after a restart 5 s long: {got}/20 new messages out, job "
            f"{'running' if alive else 'exited: ' + err.strip()[-150:]}"), emulator


def case_hostile_attributes(model):
    from tools.pubsub_emulator import Topics
    topics = Topics(PROJECT, f"attrs{int(time.time())}")
    proc = start_job(topics, model, "--timestamp_attribute", "ts")
    now = str(int(time.time() * 1000))
    ids = []
    for i, ts in enumerate(("not-a-time", "1e30", now, "99999999999999999999", now, "")):
        topics.publish("in", json.dumps(GOOD).encode(), id=f"t{i}", ts=ts)
        ids.append(f"t{i}")
    topics.publish("in", json.dumps(dict(GOOD, company="c" * 9_000_000)).encode(), id="big",
                   ts=now)
    ids.append("big")
    seen: list = []
    collect(topics, seen, set(ids), timeout=180)
    err = stop(proc)
    missing = set(ids) - set(seen)
    return not missing and "Traceback" not in err, (
        f"{len(ids) - len(missing)}/{len(ids)} out (4 bad timestamps, a 9 MB message); "
        f"{err.count('Traceback')} tracebacks")


# ---- the tuner, the trainer, the Dataflow launch ------------------------------------------
def one_line(module: str, args: list, says: str, timeout: float = 60, rc: int = 2):
    started = time.time()
    try:
        p = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, text=True,
                           capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"still running after {timeout:g} s"
    # The job's own error lines (TensorFlow's start-up lines hold "CUDA error:" on a machine
    # without a GPU), and any traceback.
    lines = [x for x in p.stderr.strip().splitlines()
             if re.match(r"(python -m )?[\w.]+: error: ", x)]
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    ok = p.returncode == rc and says in last and "Traceback" not in p.stderr and \
        len(lines) == 1
    return ok, f"exit {p.returncode} in {time.time() - started:.1f} s: {last[-150:]}"


def tuning_cases(work: str):
    def spec(name: str, text: str) -> str:
        path = os.path.join(work, name)
        with open(path, "w") as f:
            f.write(text)
        return path
    lol = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x, x]"] + [
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]" for p, c in zip("abcdefgh", "bcdefghi")])
    fifo = os.path.join(work, "fifo.yaml")
    os.mkfifo(fifo)
    base = ["--data_dir", os.path.join(work, "nodata"), "--job_dir", os.path.join(work, "tj")]
    vertex = ["--data_dir", "gs://b/prep", "--job_dir", "gs://b/job", "--vertex_spec",
              os.path.join(work, "job.json")]
    good = json.dumps({"parameters": EPOCHS, "metric": {"name": "rmse"}})
    yield "tune: a YAML alias bomb as max_trials", ["--spec", spec(
        "bomb.yaml", lol + "\nmax_trials: *i\nparameters: {}\n")] + base, "aliases"
    yield "tune: a YAML alias bomb as values", ["--spec", spec(
        "bomb2.yaml", lol + "\nparameters: {model: {type: categorical, values: *i}}\n")] + \
        base, "aliases"
    yield "tune: a 10.6 MB spec", ["--spec", spec(
        "big.yaml", "# " + "x" * 10_600_000 + "\nmax_trials: 2\n")] + base, "over 1 MiB"
    yield "tune: 20,000 nested lists", ["--spec", spec(
        "deep.yaml", "parameters: " + "[" * 20000 + "]" * 20000)] + base, "nested deeper"
    yield "tune: a FIFO as the spec", ["--spec", fifo] + base, "not a regular file"
    yield "tune: max_trials 10^10 for Vertex", ["--spec", spec(
        "many.json", json.dumps({"parameters": EPOCHS, "metric": {"name": "rmse"},
                                 "max_trials": 10**10}))] + vertex, "max_trials must be"
    yield "tune: label_key tuned", ["--spec", spec("label.json", json.dumps(
        {"parameters": {"label_key": {"type": "categorical", "values": ["a", "b"]}}}))] + \
        base, "changes what the model predicts"
    yield "tune: --hypertune_metric fixed", ["--spec", spec("hm.json", good)] + base + [
        "--hypertune_metric", "mae"], "set by the tuner"
    yield "tune: Vertex with local paths", ["--spec", spec("v.json", good), "--data_dir",
                                            "out/prep", "--job_dir", "out/job",
                                            "--vertex_spec", os.path.join(work, "j.json")], \
        "Cloud Storage"
    yield "tune: a 300-character display name", ["--spec", spec("d.json", good)] + vertex + [
        "--display_name", "x" * 150 + "\n" + "y" * 149], "--display_name"
    yield "tune: a parameter name with a newline", ["--spec", spec("nl.json", json.dumps(
        {"parameters": {"job_dir\n--job_dir=/elsewhere": EPOCHS["epochs"]}}))] + base, \
        "has no flag --job_dir\\n--job_dir"


def case_parallel_cap(work: str):
    path = os.path.join(work, "par.json")
    with open(path, "w") as f:
        json.dump({"parameters": EPOCHS, "parallel_trials": 64, "max_trials": 64}, f)
    p = subprocess.run([sys.executable, "-m", "training.tune", "--spec", path, "--data_dir",
                        os.path.join(work, "nodata"), "--job_dir", os.path.join(work, "pj")],
                       cwd=ROOT, text=True, capture_output=True, timeout=120)
    said = [x for x in p.stderr.splitlines() if "parallel_trials 64" in x]
    return bool(said), (said[0].split("training.tune: ", 1)[-1][:150] if said else
                        p.stderr.strip()[-150:])


def case_tiny_table(work: str):
    csv = os.path.join(work, "tiny.csv")
    with open(csv, "w") as f:
        f.write("x,y,c\n1,2.5,a\n2,3.1,b\n3,4.0,a\n")
    subprocess.run([sys.executable, "-m", "beam_jobs.preprocess", "--input", csv, "--output",
                    os.path.join(work, "tiny"), "--label_column", "y"], cwd=ROOT, check=True,
                   capture_output=True)
    return one_line("training.task", ["--data_dir", os.path.join(work, "tiny"), "--job_dir",
                                      os.path.join(work, "tinyjob")],
                    "--model auto chooses", timeout=60)


def dataflow_cases():
    for job, extra in (("preprocess", ["--input", "gs://b/x.csv", "--output", "gs://b/o"]),
                       ("batch_predict", ["--model_dir", "gs://b/m", "--input", "gs://b/x",
                                          "--output", "gs://b/o"]),
                       ("stream_predict", ["--streaming", "--model_dir", "gs://b/m"]),
                       ("redrive", ["--output", "gs://b/o"])):
        yield f"{job} on Dataflow without --project", f"beam_jobs.{job}", [
            "--runner", "DataflowRunner", *extra], "needs --project"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=4, help="kill -9 rounds in the soak")
    ap.add_argument("--rate", type=float, default=400, help="the soak's messages a second")
    a = ap.parse_args(argv)
    from tools.pubsub_emulator import PubSubEmulator, available
    results = []

    def report(name, outcome):
        ok, detail = outcome
        results.append(ok)
        print(f"{'ok' if ok else 'NOT OK':7s} {name:42s} {detail}", flush=True)

    with tempfile.TemporaryDirectory(prefix="faults_") as work:
        for name, args, says in tuning_cases(work):
            report(name, one_line("training.tune", args, says, timeout=120))
        report("tune: parallel_trials 64 on this machine", case_parallel_cap(work))
        for name, module, args, says in dataflow_cases():
            report(name, one_line(module, args, says, timeout=60))
        report("train: --model auto on 3 rows", case_tiny_table(work))
        if not available():
            print("the Pub/Sub emulator is not installed: streaming cases skipped")
        else:
            model = train_model(work)
            emulator = PubSubEmulator()
            os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
            try:
                report("stream: bad timestamps and a 9 MB message",
                       case_hostile_attributes(model))
                report("stream: the output topic deleted", case_deleted_topic(model))
                outcome, emulator = case_emulator_restart(model, emulator)
                report("stream: the emulator killed and restarted", outcome)
                report(f"stream: kill -9 and restart x{a.kills}",
                       case_kill_soak(model, a.kills, a.rate))
            finally:
                emulator.stop()
    print(f"{len(results)} fault cases, {results.count(False)} not ok")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
