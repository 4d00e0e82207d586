"""The streaming job under faults, on the real Pub/Sub emulator: killed with SIGKILL and
restarted, its output topic deleted, the emulator itself restarted. Nothing may be lost:
every message published comes out at least once, as a prediction or a dead letter, or is
still in the input subscription when the job stopped. The longer soaks (more kills, a
restart after the topic is back) are tools/reliability_faults.py's."""
import json
import shutil
import signal
import time

import pytest

from tests.end_to_end.test_pubsub import GOOD, PROJECT, _start_job
from tools.pubsub_emulator import PubSubEmulator, Topics, available
from tools.reliability_faults import Publisher


@pytest.fixture
def model(trained, tmp_path):
    shutil.copytree(trained[2]["export_dir"], tmp_path / "m" / "100")
    return tmp_path / "m"


def _collect(topics, seen: list, want: set, timeout: float, proc=None) -> None:
    """Pulls predictions and dead letters into `seen` (their ids) until `want` all came."""
    deadline = time.time() + timeout
    while not want <= set(seen) and time.time() < deadline and \
            (proc is None or proc.poll() is None):
        for name in ("out", "dead"):
            seen.extend(m.message.attributes["id"] for m in topics.pull_once(name, 500, 2))


@pytest.mark.slow
def test_kill_9_a_deleted_topic_and_restarts_lose_no_message(pubsub_emulator, model):
    topics = Topics(PROJECT, "faults-kill")
    publisher = Publisher(topics, "k", rate=300)
    seen: list = []
    proc = None
    try:
        # 1. SIGKILL mid-stream: what was in flight was not acknowledged, so it comes again.
        #    The publisher starts once the job answers (a backlog of its start-up time would
        #    only add minutes of predictions) and stops a second after the kill.
        proc = _start_job(topics, model)
        topics.publish("in", json.dumps(GOOD).encode(), id="up")
        _collect(topics, seen, {"up"}, timeout=180, proc=proc)
        publisher.start()
        _collect(topics, seen, {"k100"}, timeout=180, proc=proc)
        time.sleep(1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        time.sleep(1)
        publisher.stop()
        # 2. A restart: everything published so far, while it ran or was down, comes out.
        proc = _start_job(topics, model, "--max_outage_secs", "5")
        _collect(topics, seen, set(publisher.sent), timeout=180, proc=proc)
        missing = set(publisher.sent) - set(seen)
        assert not missing, (len(missing), len(publisher.sent), sorted(missing)[:10])
        # 3. Its output topic deleted: the job retries, then stops in one line naming the
        #    topic; what it could not publish stays in the input subscription.
        topics.pub.delete_topic(topic=topics.topics["out"])
        later = [f"d{i}" for i in range(50)]
        for mid in later:
            topics.publish("in", json.dumps(GOOD).encode(), id=mid)
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 1, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"stream_predict: error: cannot publish to {topics.topics['out']}")
        assert "not acknowledged and will be delivered again" in last
        assert "Traceback" not in err, err[-3000:]
        # 4. Nothing the job could not write was acknowledged: the 50 are still in the input
        #    subscription (handed back at the stop, so at once).
        back = []
        deadline = time.time() + 60
        while not set(later) <= set(back) and time.time() < deadline:
            back += [m.message.attributes["id"] for m in topics.pull_once("in", 500, 2)]
    finally:
        if publisher.ident is not None:  # started
            publisher.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    missing = set(publisher.sent) - set(seen)
    assert not missing, (len(missing), sorted(missing)[:10])
    assert set(later) <= set(back), sorted(set(later) - set(back))[:10]
    # Redeliveries of what was in flight at the kill and the outage: counted, not lost.
    print(f"{len(publisher.sent) + len(later)} published, {len(seen) - len(set(seen))} "
          "duplicates")


@pytest.mark.slow
@pytest.mark.skipif(not available(), reason="the Pub/Sub emulator is not installed")
def test_a_restarted_emulator_is_survived(model, monkeypatch):
    """Pub/Sub gone for a few seconds (the emulator killed and started again on its port, its
    topics made anew): the job's pulls and publishes retry, and it goes on."""
    emulator = PubSubEmulator()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host)
    proc = None
    try:
        topics = Topics(PROJECT, "faults-restart")
        proc = _start_job(topics, model)
        for i in range(5):
            topics.publish("in", json.dumps(GOOD).encode(), id=f"a{i}")
        seen: list = []
        _collect(topics, seen, {f"a{i}" for i in range(5)}, timeout=180, proc=proc)
        emulator.proc.send_signal(signal.SIGKILL)
        emulator.stop()
        time.sleep(3)
        emulator = PubSubEmulator(port=emulator.port)
        topics = Topics(PROJECT, "faults-restart")
        for i in range(5):
            topics.publish("in", json.dumps(GOOD).encode(), id=f"b{i}")
        _collect(topics, seen, {f"b{i}" for i in range(5)}, timeout=120, proc=proc)
        assert proc.poll() is None, proc.communicate(timeout=30)[1][-3000:]
        assert {f"b{i}" for i in range(5)} <= set(seen), seen
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        emulator.stop()
