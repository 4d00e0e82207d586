"""Redrive (beam_jobs/redrive.py): dead letters a user fixed are scored and merged into the
published output by key; what still fails stays a dead letter; the publish is atomic."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from beam_jobs import batch_predict, redrive
from beam_jobs.shared import errors
from beam_jobs.shared.publish import CLAIM_SUFFIX, STAGING_PREFIX
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
    # Killed once its staging folder is there (a kill during the claim is the test below).
    deadline = time.time() + 120
    while time.time() < deadline and not [
            d for d in glob.glob(os.path.join(out, STAGING_PREFIX + "*"))
            if not d.endswith(CLAIM_SUFFIX)]:
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
    assert not glob.glob(os.path.join(out, STAGING_PREFIX + "*"))  # the killed run's too

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
    # becomes a dead letter of its own; the run goes on and still reconciles. A line nested
    # 100,000 deep (past the JSON parser's recursion limit) replaces no published letter:
    # it is left out and counted, not a row of the input.
    with open(tmp, "w") as f:
        f.write('{"raw": "' + "x" * (redrive.LETTER_MAX_BYTES + 10) + '"}\n')
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    summary = redrive.run(["--output", out, "--rejects", tmp])
    assert summary["reconciled"] and summary["rows_read"] == 10_001
    assert summary["rejected"]["by_reason"] == {"duplicate_key": 1, "record_too_large": 1,
                                                "unparsable_number": 4}
    assert summary["ignored"] == {"not_a_dead_letter": 1}
    [big] = [r for r in read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
             if r["reason"] == "record_too_large"]
    assert len(big["raw"]) < 100_000

    # A device file as --rejects ends at the size it reports, not at the end of the world;
    # what it yields replaces no published letter.
    summary = redrive.run(["--output", out, "--rejects", "/dev/zero"])
    assert summary["reconciled"] and summary["rows_read"] == 10_001
    assert summary["rejected"]["by_reason"] == {
        "duplicate_key": 1, "record_too_large": 1, "unparsable_number": 4}


def test_redrive_refuses_what_is_not_a_published_output(tmp_path):
    with pytest.raises(errors.JobError, match="not a published batch_predict output"):
        redrive.run(["--output", str(tmp_path)])


def _small_run(trained, root, n=40, broken=(3, 7, 11), fmt="both", src_name="rows.csv",
               delimiter=","):
    """n clean rows with pickup_longitude 'n/a' on the given lines, through batch_predict
    (the file written with `delimiter`)."""
    from tools.datagen import write_csv
    src = str(root / src_name)
    write_csv(src, n, seed=5, dirty_fraction=0.0)
    lines = open(src).read().splitlines()
    col = lines[0].split(",").index("pickup_longitude")
    for i in broken:
        fields = lines[i].split(",")
        fields[col] = "n/a"
        lines[i] = ",".join(fields)
    open(src, "w").write("\n".join(line.replace(",", delimiter) for line in lines) + "\n")
    out = str(root / f"out-{fmt}")
    batch_predict.run(["--model_dir", trained[2]["export_dir"], "--input", src, "--output",
                       out, "--output_format", fmt, "--delimiter", delimiter])
    return src, out, lines


def test_redrive_parses_with_the_header_the_run_used_not_the_file_as_it_is_now(
        trained, tmp_path):
    """The source regenerated with two columns swapped after the run: a redrive that read
    the header again would parse every fixed row against the wrong columns."""
    src, out, lines = _small_run(trained, tmp_path)
    sources = json.load(open(os.path.join(out, "sources.json")))["csv_headers"]
    assert sources == {src: lines[0].split(",")}
    header = lines[0].split(",")
    a, b = header.index("pickup_longitude"), header.index("dropoff_longitude")
    swapped = []
    for line in lines:
        f = line.split(",")
        f[a], f[b] = f[b], f[a]
        swapped.append(",".join(f))
    open(src, "w").write("\n".join(swapped) + "\n")
    _fix(out, 3)
    summary = redrive.run(["--output", out])
    assert summary["rows_read"] == 40 and summary["rows_predicted"] == 40
    redriven = {p["key"]: p["prediction"] for p in read_jsonl(os.path.join(
        out, "predictions-redrive-*.jsonl"))}
    # The same fixed rows, in the original layout, scored by batch_predict directly.
    fixed = tmp_path / "fixed.csv"
    fixed.write_text("\n".join([lines[0]] + [lines[i].replace("n/a", "-73.95")
                                              for i in (3, 7, 11)]) + "\n")
    direct = batch_predict.run(["--model_dir", trained[2]["export_dir"], "--input",
                                str(fixed), "--output", str(tmp_path / "direct")])
    assert direct["rows_predicted"] == 3
    expected = {p["key"]: p["prediction"] for p in read_jsonl(str(tmp_path / "direct" / "*.jsonl"))}
    assert redriven.keys() == expected.keys()
    assert all(abs(redriven[k] - expected[k]) < 1e-4 for k in expected), (redriven, expected)
    # The record stays with the output for the next redrive.
    assert json.load(open(os.path.join(out, "sources.json")))["csv_headers"] == sources


def test_redrive_parses_with_the_delimiter_the_run_used(trained, tmp_path):
    """A run over a ';' file (batch_predict --delimiter ';') records its delimiter; the
    redrive, given no flag, parses the fixed rows with it."""
    _, out, _ = _small_run(trained, tmp_path, delimiter=";")
    assert json.load(open(os.path.join(out, "sources.json")))["csv_delimiter"] == ";"
    assert json.load(open(os.path.join(out, "summary.json")))["rows_predicted"] == 37
    _fix(out, 3)
    summary = redrive.run(["--output", out])
    assert summary["rows_read"] == 40 and summary["rows_predicted"] == 40


def test_redrive_of_a_csv_only_output_reads_its_keys_and_takes_no_stranger(trained, tmp_path):
    """An output written as CSV only: its published keys are read (a redriven key already
    published is no second row); a --rejects letter of a line or key the run never read is
    left out and counted, never published, and rows_read stays the input's."""
    src, out, lines = _small_run(trained, tmp_path, fmt="csv")
    letters = read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
    published = [ln.split(",")[0] for p in glob.glob(os.path.join(out, "predictions-*.csv"))
                 for ln in open(p).read().splitlines()[1:]]
    fixed = [dict(letters[0], raw=letters[0]["raw"].replace("n/a", "-73.95"))]
    # A fixed letter whose key is one the run already predicted: a duplicate, not a row.
    dup = letters[1]["raw"].replace("n/a", "-73.95").split(",")
    dup[0] = published[0]
    fixed.append(dict(letters[1], raw=",".join(dup)))
    stranger = dict(letters[2], line=99_999, raw=letters[2]["raw"].replace("n/a", "-73.95")
                    .replace(letters[2]["raw"].split(",")[0], "never-read"))
    fixed.append(stranger)
    fixed.append(dict(fixed[0]))  # the same place fixed twice: the first counts
    path = tmp_path / "fixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in fixed))
    summary = redrive.run(["--output", out, "--rejects", str(path)])
    assert summary["reconciled"] and summary["rows_read"] == 40
    assert summary["rows_predicted"] == 38
    assert summary["rejected"]["by_reason"] == {"duplicate_key": 1, "unparsable_number": 1}
    assert summary["ignored"] == {"not_a_dead_letter": 1, "second_fix": 1}
    keys = [ln.split(",")[0] for p in glob.glob(os.path.join(out, "predictions-*.csv"))
            for ln in open(p).read().splitlines()[1:]]
    assert len(keys) == len(set(keys)) == 38 and "never-read" not in keys


def test_redrive_batches_follow_max_batch_size(trained, tmp_path):
    """--max_batch_size sets the rows a redrive parses and scores at a time; without it,
    the flag's default (redrive's batches were a fixed 1,024 rows whatever the flag)."""
    import shutil

    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_jobs.shared.args import RedriveArgs
    _, out, _ = _small_run(trained, tmp_path)
    for argv, rows in ((["--output", out], RedriveArgs.max_batch_size),
                       (["--output", out, "--max_batch_size", "64"], 64)):
        cfg = redrive.launch(redrive.parse_args(argv), PipelineOptions(argv))
        shutil.rmtree(cfg.staging, ignore_errors=True)  # launch made it; nothing runs here
        assert cfg.rows_per_chunk == rows


def test_a_model_of_another_task_or_shape_is_refused(trained, tmp_path):
    from preprocessing.contract.schema import ColumnSpec, Schema
    previous = {"task": "regression", "passthrough": [], "label": None,
                "prediction_columns": ["key", "prediction", "model_version"]}
    clf = Schema(columns=(ColumnSpec("x", "float", "zscore"), ColumnSpec("y", "string")),
                 label="y", task="classification")
    with pytest.raises(errors.JobError, match="classification model; the output holds "
                                           "regression predictions"):
        redrive._check_same_shape(previous, clf)
    reg = Schema(columns=(ColumnSpec("x", "float", "zscore"), ColumnSpec("y", "float")),
                 label="y", task="regression")
    with pytest.raises(errors.JobError, match="the output has"):
        redrive._check_same_shape(dict(previous, label="y"), reg)
    redrive._check_same_shape(previous, reg)  # the same shape: taken


def test_kept_files_are_copied_into_a_staging_folder_no_sink_has_made_yet(tmp_path):
    """CopyKept runs beside the sinks that make the staging folder: about one redrive in
    eight failed (FileNotFoundError) until CopyFile made the folder itself. Here no sink
    makes it at all (fifty whole redrives used to stand for this)."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from inference.redrive_steps import CopyFile
    kept = []
    for name in ("predictions-00000-of-00001.jsonl", "sources.json"):
        (tmp_path / name).write_text(name)
        kept.append(str(tmp_path / name))
    staging = tmp_path / "out" / "_staging-1-x"
    with TestPipeline(runner="beam_jobs.shared.local_runner.LocalRunner") as p:
        copied = p | beam.Create(kept) | beam.ParDo(CopyFile(str(staging)))
        assert_that(copied, equal_to([str(staging / os.path.basename(k)) for k in kept]))
    assert sorted(os.listdir(staging)) == sorted(os.path.basename(k) for k in kept)
    assert (staging / "sources.json").read_text() == "sources.json"


@pytest.fixture(scope="module")
def config_redrive(trained, tmp_path_factory):
    """A redrive built from a config made here: 40 rows, three dead letters, two fixed."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from inference.model import versions
    _, out, _ = _small_run(trained, tmp_path_factory.mktemp("config"))
    _fix(out, 2)  # of the three dead letters, two fixed, one left as it was
    previous = json.load(open(os.path.join(out, "summary.json")))
    model_path = versions.resolve_model_dir(trained[2]["export_dir"])
    preds = sorted(glob.glob(os.path.join(out, "predictions-*")))
    cfg = redrive.RedriveConfig(
        output=out,
        rejects=os.path.join(out, "rejects", "*.jsonl"), fixed=None,
        model_dir=trained[2]["export_dir"], model_path=model_path,
        schema=versions.load_raw_schema(model_path), staging=os.path.join(out, "_staging-0-t"),
        key=previous["key"], passthrough=(), label=previous.get("label"),
        prediction_files=tuple(p for p in preds if p.endswith(".jsonl")),
        csv_files=tuple(p for p in preds if p.endswith(".csv")), previous=previous,
        headers={k: tuple(v) for k, v in json.load(open(os.path.join(
            out, "sources.json")))["csv_headers"].items()})
    p = beam.Pipeline(runner="beam_jobs.shared.local_runner.LocalRunner")
    outputs = redrive.build_pipeline(p, cfg)
    assert isinstance(outputs, redrive.RedriveOutputs)
    # Typed records in flight (serialised at the sinks): Predictions keyed "key", DeadLetters.
    assert_that(outputs.predictions | "Kinds" >> beam.Map(
        lambda r: (type(r).__name__, r.key_field)) | beam.Distinct(),
        equal_to([("Prediction", "key")]), label="predictions")
    assert_that(outputs.dead_letters | "LetterKinds" >> beam.Map(lambda r: type(r).__name__),
                equal_to(["DeadLetter"]), label="dead_letters")
    result = p.run()
    result.wait_until_finish()
    return out, previous, result


def test_redrive_builds_from_a_config_the_test_constructs(config_redrive):
    """build_pipeline reads nothing but its config; the parse counters are the redrive's own
    (its steps take the job's name, not batch prediction's)."""
    from apache_beam.metrics.metric import MetricsFilter
    out, _, result = config_redrive
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["job"] == "redrive"
    assert summary["rows_read"] == 40 and summary["rows_predicted"] == 39
    assert summary["rejected"]["total"] == 1
    namespaces = {r.key.metric.namespace for r in
                  result.metrics().query(MetricsFilter())["counters"]}
    assert "redrive" in namespaces and "batch_predict" not in namespaces


def _report_figures(out):
    summary = json.load(open(os.path.join(out, "summary.json")))
    earlier = summary["previous_run"]
    return summary, earlier, [
        f"<td>rows predicted</td><td class=\"n\">{summary['rows_predicted']}</td>",
        f"<td>rejected</td><td class=\"n\">{summary['rejected']['total']}</td>",
        f"<td>rows_predicted</td><td class=\"n\">{earlier['rows_predicted']}</td>"]


def test_the_redrive_redraws_the_report_with_its_own_counts(config_redrive):
    """The earlier run's report.html would show counts the redrive changed: it is replaced."""
    out, previous, _ = config_redrive
    page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    summary, earlier, cells = _report_figures(out)
    assert "<h1>redrive: model version" in page
    assert (previous["rows_predicted"], summary["rows_predicted"]) == (37, 39)
    assert earlier["rows_predicted"] == 37
    for cell in cells:
        assert cell in page, cell
    assert "<td>unparsable_number</td><td class=\"n\">1</td>" in page


def test_chromium_renders_the_redrive_report(config_redrive, tmp_path):
    from tests.helpers import CHROMIUM_MISSING, chromium_path, render_page
    if not chromium_path():
        pytest.skip(CHROMIUM_MISSING)
    out, _, _ = config_redrive
    dom = render_page(os.path.join(out, "report.html"), str(tmp_path / "redrive.png"))
    summary, earlier, _ = _report_figures(out)
    text = " ".join(re.sub(r"<[^>]+>", " ", dom).split())
    assert f"rows predicted {summary['rows_predicted']} " in text
    assert f"rows_predicted {earlier['rows_predicted']} " in text
    assert os.path.getsize(tmp_path / "redrive.png") > 5_000
