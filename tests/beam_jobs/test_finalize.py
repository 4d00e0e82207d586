"""Completion inside the pipeline (beam_jobs/shared/finalize.py, beam_jobs/shared/publish.py): the jobs
publish, summarise and mark success even where the code after `p.run()` never runs (a Flex
Template launch); counts that do not reconcile fail the job and publish nothing; a killed run
leaves the previous output."""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import apache_beam as beam
import pytest

from beam_jobs.shared import finalize, local_runner, publish, publish_lock
from preprocessing import TAXI_SPEC
from preprocessing.accounting.rejects import DeadLetter, WriteDeadLetters
from tests.helpers import ROOT, read_jsonl  # noqa: E402
from tools.datagen import write_csv

# Runs a job's module the way a template launch does: the pipeline runs to completion, then
# the process ends at once, so nothing `run()` does after `p.run()` executes.
EXIT_AFTER_RUN = """
import os, sys, runpy
import apache_beam as beam
_run = beam.Pipeline.run
def run_then_exit(self, *a, **k):
    result = _run(self, *a, **k)
    result.wait_until_finish()
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)
beam.Pipeline.run = run_then_exit
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def _exit_after_run(module, *args):
    # Progress lines at every update (not every 10 s), to see that they are printed.
    env = dict(os.environ, TFDATAFLOW_PROGRESS_SECS="0")
    return subprocess.run([sys.executable, "-c", EXIT_AFTER_RUN, module, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=env)


def _tree(root):
    """{relative path: bytes} of every file under root."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


@pytest.mark.slow
def test_preprocess_completes_inside_the_pipeline(tmp_path):
    src = str(tmp_path / "in.csv")
    stats = write_csv(src, 400, seed=3, dirty_fraction=0.05)
    out = str(tmp_path / "out")
    r = _exit_after_run("beam_jobs.preprocess", "--input", src, "--output", out,
                        "--schema_spec", TAXI_SPEC)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["rows_read"] == stats.rows and summary["reconciled"]
    assert sum(summary["splits"].values()) == stats.clean_rows
    assert os.path.exists(os.path.join(out, "_SUCCESS"))
    assert glob.glob(os.path.join(out, "train", "part-*.tfrecord.gz"))
    assert os.path.exists(os.path.join(out, "raw_schema.json"))
    assert os.path.isdir(os.path.join(out, "transform_fn"))
    assert not glob.glob(os.path.join(out, "_staging-*"))
    # The summary line came from inside the pipeline; progress lines with a rate; and by
    # default none of Beam's INFO log.
    assert "preprocess: finished: 400 rows read" in r.stderr
    assert "preprocess: read " in r.stderr and "100% of " in r.stderr and "ETA" in r.stderr
    assert re.search(r"preprocess: transformed [\d,]+ rows \([\d,.]+ rows/s\)", r.stderr)
    assert "INFO" not in r.stderr


@pytest.mark.slow
def test_batch_predict_completes_inside_the_pipeline(trained, taxi_csv, tmp_path):
    _, job_dir, _ = trained
    out = str(tmp_path / "pred")
    r = _exit_after_run("beam_jobs.batch_predict", "--model_dir", os.path.join(job_dir, "export"),
                        "--input", taxi_csv[0], "--output", out, "--evaluate_label",
                        "fare_amount")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["rows_read"] == taxi_csv[1].rows and summary["reconciled"]
    assert summary["metrics"]["examples"] > 0
    assert os.path.exists(os.path.join(out, "_SUCCESS"))
    lines = sum(len(open(f).readlines()) for f in glob.glob(os.path.join(out, "predictions-*")))
    assert lines == summary["rows_predicted"] > 0
    assert not glob.glob(os.path.join(out, "_staging-*"))
    # Blocks of a file of known size: progress in MB with the share done and an ETA.
    assert "batch_predict: read " in r.stderr and "% of " in r.stderr and "ETA" in r.stderr
    assert "batch_predict: predicted " in r.stderr


def _finalize_pipeline(tmp_path, tallies, rejects, require=()):
    """A pipeline whose sinks write one staged file and the dead letters, then Finalize with
    the given tallies."""
    out, staging = str(tmp_path / "out"), str(tmp_path / "out" / "_staging-x")
    p = beam.Pipeline(runner=local_runner.LocalRunner())
    bad = p | "Rejects" >> beam.Create(rejects)
    written = [p | "Rows" >> beam.Create(["a", "b"])
               | "Write" >> beam.io.WriteToText(os.path.join(staging, "part")),
               bad | "DeadLetters" >> WriteDeadLetters(os.path.join(staging, "rejects"))]
    counts = p | "Counts" >> beam.Create(tallies)
    spec = finalize.OutputSpec("job", managed=("part-*", "rejects"),
                               outputs={"rows_out": "rows_out"}, sized=("part-*",),
                               require=require)
    _ = (counts, bad) | finalize.Finalize(spec, staging, out, written, {"x": 1})
    return p, out


def test_finalize_fails_the_job_when_counts_do_not_reconcile(tmp_path):
    os.makedirs(tmp_path / "out")
    (tmp_path / "out" / "part-old").write_text("previous\n")
    (tmp_path / "out" / "_SUCCESS").write_text("")
    reject = DeadLetter("test", "a.csv", 1, "x", "bad_row", "")
    p, out = _finalize_pipeline(tmp_path, [("rows_read", 5), ("rows_out", 2)], [reject])
    with pytest.raises(Exception, match="counts do not reconcile"):
        p.run().wait_until_finish()
    # Nothing published: the previous output is as it was; the failed run's staging is gone
    # but for what explains the failure (its summary, dead letters).
    assert sorted(os.listdir(out)) == ["_FAILED_RUN", "_SUCCESS", "part-old"]
    staged = json.load(open(os.path.join(out, "_FAILED_RUN", "summary.json")))
    assert staged["rows_read"] == 5 and staged["rejected"]["by_reason"] == {"bad_row": 1}
    assert not staged["reconciled"]


def test_finalize_publishes_when_counts_reconcile(tmp_path):
    os.makedirs(tmp_path / "out" / "_staging-old" / "x")  # left by a killed run
    (tmp_path / "out" / "part-old").write_text("previous\n")
    reject = DeadLetter("test", "a.csv", 1, "x", "bad_row", "")
    p, out = _finalize_pipeline(tmp_path, [("rows_read", 3), ("rows_out", 2)], [reject])
    p.run().wait_until_finish()
    files = sorted(os.listdir(out))
    assert files == ["_SUCCESS", "part-00000-of-00001", "rejects", "summary.json"]
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["rows_out"] == 2 and summary["reconciled"] and summary["x"] == 1
    # The sizes a reader checks the published files against (training.guards.check_shards).
    assert summary["files"] == {"part-00000-of-00001": 4}


def test_a_rerun_replaces_what_the_last_run_wrote_under_the_jobs_names(tmp_path):
    """preprocess's OutputSpec over an earlier run's output: a rerun with one shard and no
    test split leaves no stale shard and no test folder; a file the job does not own stays."""
    from beam_jobs import preprocess
    out = tmp_path / "out"
    old = [f"train/part-0000{i}-of-00003.tfrecord.gz" for i in range(3)] + [
        "eval/part-00000-of-00001.tfrecord.gz", "test/part-00000-of-00001.tfrecord.gz",
        "summary.json", "_SUCCESS", "notes.txt"]
    for rel in old:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("old")
    staging = str(out / "_staging-x")
    p = beam.Pipeline(runner=local_runner.LocalRunner())
    written = [p | f"Rows{s}" >> beam.Create(rows)
               | f"Write{s}" >> beam.io.WriteToText(os.path.join(staging, s, "part"),
                                                   file_name_suffix=".txt", num_shards=1)
               for s, rows in (("train", ["a", "b", "c"]), ("eval", ["d"]))]
    bad = p | "Rejects" >> beam.Create([DeadLetter("test", "a.csv", 1, "x", "bad_row", "")])
    written.append(bad | "DeadLetters" >> WriteDeadLetters(os.path.join(staging, "rejects")))
    counts = p | "Counts" >> beam.Create([("rows_read", 5), ("rows_train", 3),
                                          ("rows_eval", 1), ("rows_test", 0)])
    _ = (counts, bad) | finalize.Finalize(preprocess.OUTPUTS, staging, str(out), written)
    p.run().wait_until_finish()
    assert os.listdir(out / "train") == ["part-00000-of-00001.txt"]  # no stale shards
    assert os.listdir(out / "eval") == ["part-00000-of-00001.txt"]
    assert not (out / "test").exists() and (out / "notes.txt").read_text() == "old"
    summary = json.load(open(out / "summary.json"))
    assert summary["splits"] == {"train": 3, "eval": 1, "test": 0} and summary["reconciled"]
    assert (out / "_SUCCESS").exists() and not glob.glob(str(out / "_staging-*"))


def test_a_file_cut_short_publishes_what_was_read_as_partial_without_success(tmp_path):
    """A file-level dead letter (an input cut short, corrupt or unreadable: the reading
    tests in test_preprocess_steps.py make them): what was read is published, the summary
    says "complete": false, no _SUCCESS is written and the job fails saying so."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "_SUCCESS").write_text("")  # an earlier complete run's
    cut = DeadLetter("test", "b.csv.gz", None, None, "truncated_file", "")
    p, out = _finalize_pipeline(tmp_path, [("rows_read", 3), ("rows_out", 2)], [cut])
    with pytest.raises(Exception, match="cut short, corrupt or unreadable"):
        p.run().wait_until_finish()
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["complete"] is False and summary["reconciled"] and summary["rows_out"] == 2
    assert not os.path.exists(os.path.join(out, "_SUCCESS"))
    assert os.path.exists(os.path.join(out, "part-00000-of-00001"))


def test_rows_all_rejected_publish_nothing_and_keep_the_dead_letters(tmp_path):
    """Every row read was rejected (preprocess: a gzip bomb's one line), so an output that
    must have rows has none: nothing is published, the dead letters wait in _FAILED_RUN/."""
    big = DeadLetter("test", "bomb.csv.gz", 2, "x", "record_too_large", "")
    p, out = _finalize_pipeline(tmp_path, [("rows_read", 1)], [big], require=("rows_out",))
    with pytest.raises(Exception, match="no rows reached rows_out"):
        p.run().wait_until_finish()
    assert sorted(os.listdir(out)) == ["_FAILED_RUN"]
    failed = read_jsonl(os.path.join(out, "_FAILED_RUN", "rejects", "*.jsonl"))
    assert [r["reason"] for r in failed] == ["record_too_large"]


def test_a_run_rejecting_every_row_says_why_in_its_one_line_and_its_summary(tmp_path):
    """Each reason's first dead letter in file order (FirstRejects) is in the summary, and the
    most frequent reason's in the failed run's one line: the why, not only the count."""
    letters = [DeadLetter("test", "b.csv", 1, "x", "missing_column", "b's header"),
               DeadLetter("test", "a.csv", 9, "x", "missing_column", "a's header, line 9"),
               DeadLetter("test", "a.csv", 3, "x", "missing_column", "a's header, line 3"),
               DeadLetter("test", "a.csv", None, "x", "bad_encoding", "y" * 1000)]
    p, out = _finalize_pipeline(tmp_path, [("rows_read", 4)], letters, require=("rows_out",))
    with pytest.raises(Exception, match=r"rejected \{'bad_encoding': 1, 'missing_column': 3\}; "
                       r"the first missing_column: a.csv:3: a's header, line 3\); nothing"):
        p.run().wait_until_finish()
    first = json.load(open(os.path.join(out, "_FAILED_RUN", "summary.json")))["first_rejects"]
    assert first == {"bad_encoding": "a.csv: " + "y" * 300,
                     "missing_column": "a.csv:3: a's header, line 3"}


def _staged(out, run, files):
    staging = out / f"{publish.STAGING_PREFIX}{int(time.time())}-{run}"
    for rel, text in files.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_text(text)
    return staging


def test_a_publish_a_kill_interrupts_is_completed_by_the_next_lock_holder(tmp_path,
                                                                          monkeypatch):
    out = tmp_path / "out"
    (out / "train").mkdir(parents=True)
    (out / "train" / "old").write_text("old")
    (out / publish.SUCCESS).write_text("")
    staging = _staged(out, "r", {"train/a": "a", "train/b": "b", "rejects/r": "r",
                                 "summary.json": "{}"})
    rename, moves = publish.FileSystems.rename, []

    def dies_after_one(src, dst):  # the process is killed after its first move
        if moves:
            raise KeyboardInterrupt("killed")
        moves.append(src)
        return rename(src, dst)
    monkeypatch.setattr(publish.FileSystems, "rename", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        publish.publish(str(staging), str(out), ["train", "rejects", "summary.json"])
    monkeypatch.setattr(publish.FileSystems, "rename", rename)
    # Neither output is whole now, and no reader takes it: _SUCCESS went first.
    assert not (out / publish.SUCCESS).exists() and staging.exists()
    with publish.PublishLock(str(out), "next", "job"):
        assert publish.recover(str(out), "job") == [str(staging)]
    assert _tree(str(out / "train")) == {"a": b"a", "b": b"b"}
    assert (out / "rejects" / "r").read_text() == "r" and (out / publish.SUCCESS).exists()
    assert not staging.exists()


def test_a_retried_publish_resumes(tmp_path, monkeypatch):
    out = tmp_path / "out"
    staging = _staged(out, "r", {"train/a": "a", "train/b": "b"})
    rename = publish.FileSystems.rename
    calls = []

    def fails_once(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise OSError("transient")
        return rename(src, dst)
    monkeypatch.setattr(publish.FileSystems, "rename", fails_once)
    with pytest.raises(OSError):
        publish.publish(str(staging), str(out), ["train"], success=False)
    publish.publish(str(staging), str(out), ["train"], success=False)
    assert _tree(str(out / "train")) == {"a": b"a", "b": b"b"}
    assert not (out / publish.SUCCESS).exists() and not staging.exists()


def test_a_lock_whose_process_is_gone_is_taken_over_at_once(tmp_path):
    import socket
    out = tmp_path / "out"
    out.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    now = time.time()
    (out / publish.LOCK).write_text(json.dumps({"owner": "killed", "since": now,
                                                "renewed": now, "pid": gone.pid,
                                                "host": socket.gethostname()}))
    t0 = time.time()
    with publish.PublishLock(str(out), "me", "job", poll_secs=0.05):
        assert json.loads((out / publish.LOCK).read_text())["owner"] == "me"
    assert time.time() - t0 < 5
    # Elsewhere, a holder that stopped renewing is gone once its lease has passed.
    (out / publish.LOCK).write_text(json.dumps({"owner": "far", "since": now - 60,
                                                "renewed": now - 60, "pid": 1,
                                                "host": "another-host"}))
    with publish.PublishLock(str(out), "me", "job", lease_secs=30, poll_secs=0.05):
        pass
    assert time.time() - t0 < 10


def test_a_held_lock_is_renewed_so_it_is_not_taken_over(tmp_path):
    """Renewed in place of the old record, never half written: a waiter reading it while it
    is renewed (here every 0.01 s) always reads a whole lock (CI at 44dbd6e once read an
    empty one, truncated by the renewal)."""
    out = tmp_path / "out"
    with publish.PublishLock(str(out), "slow", "job", lease_secs=0.04):
        first = json.loads((out / publish.LOCK).read_text())["renewed"]
        records = [json.loads((out / publish.LOCK).read_text()) for _ in range(3000)]
        time.sleep(0.05)
        assert json.loads((out / publish.LOCK).read_text())["renewed"] > first
        assert not publish_lock._holder_gone(records[-1], 1.0)
    assert sorted(os.listdir(out)) == []  # released, and no renewal's scratch file left


@pytest.mark.slow
def test_killed_preprocess_leaves_the_previous_output(preprocessed, tmp_path):
    import shutil
    out = str(tmp_path / "out")
    shutil.copytree(preprocessed[0], out)
    before = _tree(out)
    src = str(tmp_path / "big.csv")
    write_csv(src, 60_000, seed=9, dirty_fraction=0.01)
    proc = subprocess.Popen([sys.executable, "-m", "beam_jobs.preprocess", "--input", src,
                             "--output", out, "--schema_spec", TAXI_SPEC], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not glob.glob(os.path.join(out, "_staging-*", "*")):
            assert proc.poll() is None, "the run ended before it was killed"
            time.sleep(0.2)
        time.sleep(1)
        assert proc.poll() is None, "the run ended before it was killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert [n for n in os.listdir(out) if n.startswith("_staging-")], "it had started writing"
    after = _tree(out)
    assert {k: v for k, v in after.items() if not k.startswith("_staging-")} == before
    # The next run removes what the killed one left.
    from beam_jobs import preprocess
    small = str(tmp_path / "small.csv")
    write_csv(small, 100, seed=4)
    preprocess.run(["--input", small, "--output", out, "--schema_spec", TAXI_SPEC,
                    "--stale_staging_hours", "0"])
    assert not glob.glob(os.path.join(out, "_staging-*"))


def test_only_stale_staging_folders_are_removed(tmp_path):
    out = str(tmp_path / "out")
    live = publish.new_staging(out)  # a run that started now: maybe still writing
    old = os.path.join(out, f"{publish.STAGING_PREFIX}{int(time.time()) - 25 * 3600}-abc")
    legacy = os.path.join(out, publish.STAGING_PREFIX + "0123456789ab")  # no start time
    for d in (live, old, legacy):
        os.makedirs(os.path.join(d, "train"))
        open(os.path.join(d, "train", "f"), "w").close()
    removed = publish.remove_staging_dirs(out, older_than_hours=24)
    assert sorted(removed) == sorted([old, legacy])
    assert os.path.exists(os.path.join(live, "train", "f"))
    assert publish.remove_staging_dirs(out, older_than_hours=0) == [live]


def test_a_staging_folder_whose_run_is_gone_is_removed_at_once(tmp_path):
    """A killed local run's staging folder names its process: the next run removes it as
    soon as that process is gone, not only after --stale_staging_hours (a killed redrive's
    was left behind by the rerun)."""
    import subprocess
    import sys
    out = str(tmp_path / "out")
    mine = publish.new_staging(out)  # this process: alive
    proc = subprocess.Popen([sys.executable, "-c",
                             "from beam_jobs.shared import publish; import sys; "
                             f"print(publish.new_staging({out!r}))"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    dead = proc.communicate(timeout=60)[0].strip()
    assert os.path.isfile(os.path.join(dead, publish.OWNER))
    assert publish.owner_gone(dead) and not publish.owner_gone(mine)
    assert publish.remove_staging_dirs(out, older_than_hours=24) == [dead]
    assert os.path.isdir(mine)
    # What the run publishes never includes its owner record.
    with open(os.path.join(mine, "part"), "w") as f:
        f.write("x")
    publish.publish(mine, out, ["part"])
    assert sorted(os.listdir(out)) == ["_SUCCESS", "part"]


def test_a_staging_folder_appears_with_its_owner_and_a_killed_claim_is_removed(
        tmp_path, monkeypatch):
    """A run killed between making its folder and writing its OWNER left a folder no later
    run could tell from a live one's, kept until --stale_staging_hours (a CI run hit that
    window). The folder now takes its name once OWNER is written; a kill mid-claim leaves a
    claim folder, removed once CLAIM_SECS old."""
    out = str(tmp_path / "out")
    mine = publish.new_staging(out)
    assert os.listdir(out) == [os.path.basename(mine)]
    with open(os.path.join(mine, publish.OWNER)) as f:
        assert json.load(f)["pid"] == os.getpid()

    def killed(obj, f):  # the owner record half written, then the process killed
        f.write('{"host": ')
        raise KeyboardInterrupt
    monkeypatch.setattr(publish.json, "dump", killed)
    with pytest.raises(KeyboardInterrupt):
        publish.new_staging(out)
    monkeypatch.undo()
    claim, = [d for d in publish.staging_dirs(out) if d != mine]
    assert claim.endswith(publish.CLAIM_SUFFIX)
    assert publish.remove_staging_dirs(out) == []  # young: a run may be claiming it now
    started = int(os.path.basename(claim).split("-")[1])
    old = claim.replace(f"-{started}-", f"-{started - int(publish.CLAIM_SECS) - 1}-")
    os.rename(claim, old)
    assert publish.remove_staging_dirs(out) == [old]
    assert os.listdir(out) == [os.path.basename(mine)]


def test_publishes_into_one_output_happen_one_at_a_time(tmp_path, monkeypatch):
    """Two runs finishing together: the lock serialises the moves, and the output ends as
    exactly one run's files (never a mix)."""
    import threading
    out = tmp_path / "out"
    stagings = []
    for run, names in (("a", ["part-0", "part-1", "part-2"]), ("b", ["part-0", "part-9"])):
        st = out / f"{publish.STAGING_PREFIX}{int(time.time())}-{run}"
        (st / "pred").mkdir(parents=True)
        for n in names:
            (st / "pred" / n).write_text(run)
        stagings.append(st)
    rename = publish.FileSystems.rename
    inside, overlaps = [], []

    def slow_rename(src, dst):  # widen the window in which publishes could interleave
        time.sleep(0.05)
        return rename(src, dst)
    monkeypatch.setattr(publish.FileSystems, "rename", slow_rename)

    def run(st):
        with publish.PublishLock(str(out), st.name, "job", poll_secs=0.01):
            inside.append(st.name)
            if len(inside) > 1:
                overlaps.append(list(inside))
            publish.publish(str(st), str(out), ["pred"])
            inside.remove(st.name)

    threads = [threading.Thread(target=run, args=(st,)) for st in stagings]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlaps
    files = {n: (out / "pred" / n).read_text() for n in os.listdir(out / "pred")}
    assert set(files.values()) in ({"a"}, {"b"})
    assert sorted(files) in (["part-0", "part-1", "part-2"], ["part-0", "part-9"])
    assert not (out / publish.LOCK).exists()


def test_a_killed_publishs_lock_is_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / publish.LOCK).write_text(json.dumps({"owner": "dead", "since": time.time() - 7200}))
    with publish.PublishLock(str(out), "me", "job"):
        assert json.loads((out / publish.LOCK).read_text())["owner"] == "me"
    assert not (out / publish.LOCK).exists()
    # A live lock is waited for, not taken.
    (out / publish.LOCK).write_text(json.dumps({"owner": "live", "since": time.time()}))
    import threading
    timer = threading.Timer(0.5, (out / publish.LOCK).unlink)
    timer.start()
    t0 = time.time()
    with publish.PublishLock(str(out), "me", "job", poll_secs=0.05):
        waited = time.time() - t0
    timer.join()
    assert waited >= 0.45


@pytest.mark.parametrize("content", ["", "{\"owner\": \"half", "\x00\x01", "[]"])
def test_an_empty_or_unreadable_lock_never_hangs(tmp_path, content, capsys):
    """A lock file with nothing readable in it (a kill between its create and its write, a
    full disk) is its holder gone once it is older than the bound: taken over, not waited
    on forever."""
    out = tmp_path / "out"
    out.mkdir()
    lock = out / publish.LOCK
    lock.write_text(content)
    old = time.time() - 60
    os.utime(lock, (old, old))
    t0 = time.time()
    with publish.PublishLock(str(out), "me", "job", poll_secs=0.05, max_wait_secs=5):
        assert json.loads(lock.read_text())["owner"] == "me"
    assert time.time() - t0 < 2
    # A fresh unreadable one may be being written: waited for (briefly), then taken over.
    lock.write_text(content)
    t0 = time.time()
    with publish.PublishLock(str(out), "me", "job", poll_secs=0.05, unreadable_secs=0.3):
        pass
    assert 0.3 <= time.time() - t0 < 3


def test_a_live_holder_is_waited_for_with_a_reason_and_a_bound(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / publish.LOCK).write_text(json.dumps({"owner": "other", "since": time.time(),
                                                "renewed": time.time() + 3600,
                                                "host": "elsewhere", "pid": 1}))
    with pytest.raises(publish.LockWaitTimeout, match="run other .host elsewhere, pid 1. has "
                                                      "held the publish lock"):
        with publish.PublishLock(str(out), "me", "job", poll_secs=0.05, max_wait_secs=0.3):
            pass
    err = capsys.readouterr().err
    assert "job: waiting for run other (host elsewhere, pid 1) to finish publishing" in err
    assert "giving up after 0 s" in err


def test_an_output_the_input_glob_reaches_is_refused_at_launch(tmp_path):
    from beam_jobs import preprocess
    from beam_jobs.shared.cli import JobError
    (tmp_path / "in.csv").write_text("id,x,y\na,1,2\n")
    with pytest.raises(JobError, match="put the output outside the input"):
        preprocess.run(["--input", str(tmp_path / "**"), "--output", str(tmp_path / "out"),
                        "--label_column", "y"])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_failed_run_keeps_the_previous_output_and_leaves_no_scratch(tmp_path):
    """A run that reads no rows publishes nothing (the last complete output stays, with its
    _SUCCESS); its staging goes but for what explains it; tf.transform's scratch is removed
    after a success and after a failure."""
    import shutil

    from beam_jobs import preprocess
    src, empty, out, scratch = (tmp_path / "in.csv", tmp_path / "empty.csv",
                                str(tmp_path / "out"), tmp_path / "scratch")
    src.write_text("id,x,y\n" + "".join(f"r{i},{i * 7 % 100},{i % 5}\n" for i in range(100)))
    empty.write_text("id,x,y\n")
    preprocess.run(["--input", str(src), "--output", out, "--label_column", "y",
                    "--tft_temp_dir", str(scratch)])
    # The next run (its input has no rows) uses the schema the first one inferred.
    shutil.copy(os.path.join(out, "raw_schema.json"), tmp_path / "spec.json")
    args = ["--output", out, "--schema_spec", str(tmp_path / "spec.json"),
            "--tft_temp_dir", str(scratch)]
    before = _tree(out)
    assert os.listdir(scratch) == []
    with pytest.raises(Exception, match="no rows read"):
        preprocess.run(["--input", str(empty), *args])
    after = _tree(out)
    assert {k: v for k, v in after.items() if not k.startswith("_FAILED_RUN")} == before
    assert json.load(open(os.path.join(out, "_FAILED_RUN", "summary.json")))["rows_read"] == 0
    assert not glob.glob(os.path.join(out, "_staging-*")) and os.listdir(scratch) == []


def test_a_run_that_fails_where_run_sees_it_removes_its_staging(tmp_path):
    from beam_jobs.shared import cli

    class Failing:
        def run(self):
            raise OSError("No space left on device")
    staging, scratch = tmp_path / "out" / "_staging-1-a", tmp_path / "tft"
    for d in (staging / "train", scratch):
        d.mkdir(parents=True)
        (d / "f").write_text("x")
    with pytest.raises(OSError, match="No space"):
        cli.run_and_read_summary(Failing(), None, str(tmp_path / "out"),
                                 cleanup=(str(staging), str(scratch)))
    assert not staging.exists() and not scratch.exists()


def test_progress_after_many_small_files_is_a_few_lines_and_the_last(capsys):
    from preprocessing.accounting.counting import Progress
    progress = Progress("job", "read-many-files", 20_000, unit="bytes")
    for _ in range(20_000):  # the end of each one-byte file
        progress.add(1)
        progress.show()
    lines = capsys.readouterr().err.splitlines()
    assert 1 <= len(lines) <= 3 and "100% of" in lines[-1]


@pytest.mark.slow
def test_a_designed_failure_is_one_line_at_the_command_line(tmp_path):
    """A header-only input: Finalize refuses to publish (no rows read: no empty splits, no
    _SUCCESS); the command line says so in one line with exit status 1, without Beam's
    traceback."""
    import subprocess
    import sys

    from preprocessing import TAXI_SPEC
    from tests.helpers import ROOT
    src = tmp_path / "header.csv"
    src.write_text("key,pickup_datetime,pickup_longitude,pickup_latitude,dropoff_longitude,"
                   "dropoff_latitude,passenger_count,payment_type,company,fare_amount\n")
    r = subprocess.run([sys.executable, "-m", "beam_jobs.preprocess", "--input", str(src),
                        "--schema_spec", TAXI_SPEC, "--output", str(tmp_path / "out")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "preprocess: error: no rows read" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "EmptyOutput" not in r.stderr
    out = tmp_path / "out"
    assert not (out / "_SUCCESS").exists() and not (out / "train").exists()
