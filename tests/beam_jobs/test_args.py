"""Each job's arguments are typed and checked without I/O: bad arguments fail before any model,
input or output is touched (here: none of them exists), with one line naming the flag."""
import dataclasses

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs import batch_predict, preprocess, redrive, stream_predict
from beam_jobs.shared import common_options, local_runner
from beam_jobs.shared.args import JOB_ARGS, BatchPredictArgs, PreprocessArgs

NOWHERE = "/nonexistent/nothing-here"


@pytest.mark.parametrize("job,args,message", [
    (batch_predict, ["--input", "x", "--output", "y"], "--model_dir is required"),
    (batch_predict, ["--model_dir", NOWHERE, "--input", "x", "--output", "y",
                     "--min_batch_size", "0"], "--min_batch_size"),
    (batch_predict, ["--model_dir", NOWHERE, "--input", "x", "--output", "y",
                     "--run_date", "2026-13-01"], "--run_date must be YYYY-MM-DD"),
    (batch_predict, ["--model_dir", NOWHERE, "--input", "x", "--output", "y",
                     "--jpeg_quality", "0"], "--jpeg_quality"),
    (preprocess, ["--input", NOWHERE, "--output", NOWHERE, "--split", "0.5,0.6"], "--split"),
    (preprocess, ["--input", NOWHERE, "--output", NOWHERE], "give --schema_spec"),
    (preprocess, ["--input", NOWHERE, "--output", NOWHERE, "--label_column", "y",
                  "--delimiter", ";;"], "--delimiter must be one character"),
    (preprocess, ["--input", NOWHERE, "--output", NOWHERE, "--format", "images",
                  "--task", "regression"], "image labels are classes"),
    (stream_predict, ["--streaming", "--model_dir", NOWHERE, "--output_dir", NOWHERE],
     "give exactly one of"),
    (stream_predict, ["--model_dir", NOWHERE, "--replay", NOWHERE, "--output_dir", NOWHERE],
     "add --streaming"),
    (batch_predict, ["--model_dir", NOWHERE, "--input", "x", "--output", "y",
                     "--output_table", "p-1:ds.t$20261124"], "without a $ partition"),
    (batch_predict, ["--model_dir", NOWHERE, "--input", "x", "--output", "y",
                     "--output_table", "ds.t", "--temp_location", "gs://b/t"], "needs --project"),
    (batch_predict, ["--model_dir", NOWHERE, "--input", "x", "--output", "y",
                     "--output_table", "p-1:ds.t", "--temp_location", "/tmp"],
     "give --temp_location gs://"),
    (stream_predict, ["--streaming", "--model_dir", NOWHERE, "--input_topic", "projects/p/t",
                      "--output_table", "just-a-name"], "not a BigQuery table"),
    # `$` matches before a trailing newline: the table pattern must match the whole value.
    (batch_predict, ["--model_dir", NOWHERE, "--input", "x", "--output", "y",
                     "--output_table", "p-1:ds.t\n", "--temp_location", "gs://b/t"],
     "not a BigQuery table"),
])
def test_bad_arguments_fail_before_any_io(job, args, message):
    with pytest.raises(SystemExit) as e:
        job.parse_args(PipelineOptions(args))
    text = str(e.value.code)
    assert text.startswith(f"{job.JOB}: error:") and message in text and "\n" not in text


def _output_flag(job: str) -> str:
    return "--output_dir" if job == "stream_predict" else "--output"


@pytest.mark.parametrize("job", [batch_predict, preprocess, stream_predict, "redrive"])
@pytest.mark.parametrize("args,message", [
    (["--evaluate_lable", "fare_amount"], "unknown flag --evaluate_lable (did you mean "
                                          "--evaluate_label?)"),
    (["--golden_sett=g.csv"], "unknown flag --golden_sett (did you mean --golden_set?)"),
    (["--max_metric_regresion", "0.1"], "did you mean --max_metric_regression?"),
    (["--num_workrs", "3"], "did you mean --num_workers?"),   # a typo of Dataflow's own
    (["--model_dir"[:-1] + "z", "m"], "unknown flag --model_diz"),
    (["stray"], "unexpected argument 'stray'"),
])
def test_no_flag_is_ever_discarded(job, args, message):
    """Beam drops what it cannot parse with one warning; every job refuses it in one line,
    naming the closest flag, before anything runs."""
    if job == "redrive":
        from beam_jobs import redrive as job
    with pytest.raises(SystemExit) as e:
        common_options.job_options([_output_flag(job.JOB), NOWHERE] + args, job.JOB,
                                   JOB_ARGS[job.JOB], "doc")
    text = str(e.value.code)
    assert text.startswith(f"{job.JOB}: error:") and message in text and "\n" not in text


@pytest.mark.parametrize("job, flag, owners", [
    ("stream_predict", "--delimiter=;", "only of preprocess, batch_predict"),
    ("redrive", "--delimiter", "only of preprocess, batch_predict"),
    ("stream_predict", "--csv_block_mb", "only of preprocess, batch_predict, redrive"),
    ("preprocess", "--model_dir", "only of batch_predict, stream_predict, redrive"),
])
def test_another_jobs_flag_is_refused_naming_whose_it_is(job, flag, owners):
    """Beam registers every job's options in one parser: a flag of another of our jobs
    parsed, and was ignored (a ';' file streamed with commas)."""
    with pytest.raises(SystemExit) as e:
        common_options.job_options([_output_flag(job), NOWHERE, flag, ";"], job,
                                   JOB_ARGS[job], "doc")
    text = str(e.value.code)
    name = flag.split("=")[0]
    assert text == f"{job}: error: {name} is not a flag of {job} ({owners})"


def test_beams_and_dataflows_own_flags_keep_working():
    options = common_options.job_options(
        ["--model_dir", "m", "--input", "i", "--output", "o", "--evaluate_label", "y",
         "--runner", "DataflowRunner", "--project", "p", "--region", "r", "--num_workers", "3",
         "--temp_location", "gs://b/tmp",
         "--experiments=use_runner_v2", "--experiments", "x", "--setup_file", "./setup.py",
         "--streaming", "--direct_num_workers", "2"], batch_predict.JOB, BatchPredictArgs, "doc")
    from apache_beam.options.pipeline_options import WorkerOptions
    assert options.view_as(WorkerOptions).num_workers == 3


def test_help_shows_each_flags_default(capsys):
    with pytest.raises(SystemExit):
        common_options.job_options(["--help"], batch_predict.JOB, BatchPredictArgs, "doc")
    out = " ".join(capsys.readouterr().out.split())
    assert "Largest batch RunInference forms. (default: 1024)" in out
    assert "(default: 0.05)" in out  # --max_metric_regression


def test_arguments_are_a_typed_frozen_dataclass():
    args = batch_predict.parse_args(PipelineOptions(
        ["--model_dir", NOWHERE, "--input", "in/{date}/*.csv", "--output", "out/{date}/",
         "--run_date", "2026-01-05", "--max_batch_size", "64"]))
    assert dataclasses.is_dataclass(args)
    assert args.input == "in/2026-01-05/*.csv" and args.output == "out/2026-01-05"
    assert args.max_batch_size == 64 and args.rows_per_chunk == 64  # defaulted from it
    assert args.csv_block_mb == 2.0 and args.log_level == "WARNING"
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.output = "elsewhere"
    # The launch step is where I/O happens: the same arguments fail there, on the model.
    with pytest.raises(SystemExit, match="no SavedModel"):
        argv = ["--model_dir", NOWHERE, "--input", "x", "--output", "y"]
        batch_predict.launch(batch_predict.parse_args(argv), PipelineOptions(argv))


@pytest.mark.parametrize("job", [preprocess, batch_predict])
@pytest.mark.parametrize("word", ["tab", "\\t", "\t"])
def test_a_tab_delimiter_can_be_typed(job, word):
    argv = ["--model_dir", NOWHERE] if job is batch_predict else ["--label_column", "y"]
    args = job.parse_args(argv + ["--input", "in.tsv", "--output", "out", "--delimiter", word])
    assert args.delimiter == "\t"


@pytest.mark.parametrize("job, argv, bad", [
    (preprocess, ["--input", "in.csv", "--output", "out/", "--label_column", "y"],
     ["--split", "0.5,0.6"]),
    (batch_predict, ["--model_dir", NOWHERE, "--input", "x", "--output", "y",
                     "--max_batch_size", "64"], ["--min_batch_size", "0"]),
    (stream_predict, ["--streaming", "--model_dir", NOWHERE, "--input_topic",
                      "projects/p/topics/in", "--output_dir", "out"], ["--window_secs", "0"]),
    (redrive, ["--output", "out/", "--model_dir", NOWHERE], ["--slice_by", "a"]),
])
def test_every_job_parses_its_command_line_as_it_parses_its_options(job, argv, bad):
    """One protocol: parse_args(argv) -> the job's args dataclass, the same as from the
    PipelineOptions Beam makes of those words; a bad word fails the same way too."""
    args = job.parse_args(argv)
    assert args == job.parse_args(PipelineOptions(argv))
    assert type(args) is JOB_ARGS[job.JOB]
    with pytest.raises(SystemExit) as from_argv:
        job.parse_args(argv + bad)
    with pytest.raises(SystemExit) as from_options:
        job.parse_args(PipelineOptions(argv + bad))
    assert str(from_argv.value) == str(from_options.value) and bad[0] in str(from_argv.value)


def test_local_runs_name_a_runner_that_downloads_nothing():
    opts = common_options.job_options(["--input", "x"], "preprocess", PreprocessArgs, "")
    assert opts.get_all_options()["runner"] == local_runner.LOCAL_RUNNER
    opts = common_options.job_options(["--runner", "DataflowRunner", "--project", "p",
                                       "--region", "r", "--temp_location", "gs://b/t"],
                                      "preprocess", PreprocessArgs, "")
    assert opts.get_all_options()["runner"] == "DataflowRunner"


@pytest.mark.slow
def test_local_multi_process_workers_run_the_fast_exit_worker():
    """local_runner.LocalRunner starts its multi-process workers as beam_jobs/shared/local_worker.py
    (Beam's harness, then an immediate exit), and they run the pipeline."""
    import os
    import sys

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    opts = PipelineOptions(["--direct_num_workers", "2",
                            "--direct_running_mode", "multi_processing"])
    with beam.Pipeline(local_runner.LocalRunner(), options=opts) as p:
        out = (p | beam.Create([1, 2, 3])
               | beam.Map(lambda x: (x * 2, os.path.basename(sys.argv[0]))))
        assert_that(out, equal_to([(2, "local_worker.py"), (4, "local_worker.py"),
                                   (6, "local_worker.py")]))


def test_runner_data_writes_are_not_cleared_by_a_blocked_flush():
    """The local runner sends a bundle's input through a stream that another thread flushes
    every second; a flush that waits on a full send queue must not clear what is written
    meanwhile (Beam 2.77 lost those bytes: local_runner.fix_runner_data_plane)."""
    import threading
    import time

    from apache_beam.runners.worker import data_plane
    local_runner.fix_runner_data_plane()
    sent, lock = [], threading.Lock()

    def flushed(data):  # a send queue that is full: the flush waits before it clears
        if data:
            time.sleep(0.02)
        with lock:
            sent.append(data)

    stream = data_plane.TimeBasedBufferingClosableOutputStream(
        sent.append, flush_callback=flushed, time_flush_threshold_ms=5)
    for i in range(100):
        stream.write(b"%06d" % i * 100)
        time.sleep(0.001)
    stream.close()
    data = b"".join(sent)
    assert data == b"".join(b"%06d" % i * 100 for i in range(100))


def _delivered_across_a_side_input_boundary(options, n, size, delay=0.0):
    """A LocalRunner pipeline whose n elements of `size` bytes cross a stage boundary that
    waits on a side input computed from them (as tf.transform's TransformDataset waits on
    the analysis); asserts each element arrives exactly once."""
    import os
    import time

    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    with beam.Pipeline(local_runner.LocalRunner(), options=options) as p:
        big = (p | beam.Create(range(n)) | beam.Reshuffle()
               | "Blob" >> beam.Map(lambda i: (i, os.urandom(8) * (size // 8))))
        ready = big | "One" >> beam.Map(lambda kv: 1) | beam.CombineGlobally(min)

        def after_side(kv, one):
            time.sleep(delay)  # a consumer slower than the runner's sending
            return kv[0] if len(kv[1]) == size * one else -1

        got = (big | "AfterSide" >> beam.Map(after_side, beam.pvalue.AsSingleton(ready))
               | beam.combiners.Count.PerElement()
               | beam.Filter(lambda id_count: id_count[0] >= 0 and id_count[1] == 1)
               | beam.combiners.Count.Globally())
        assert_that(got, equal_to([n]))


@pytest.mark.slow
def test_one_process_local_run_delivers_every_element_across_a_side_input_boundary():
    """In one process (the local default) a bundle's input is sent whole before the bundle
    runs, as the in-memory worker reads only what it holds when asked."""
    _delivered_across_a_side_input_boundary(PipelineOptions([]), 2000, 50_000)


@pytest.mark.slow
def test_multi_process_local_run_delivers_every_element_of_a_large_input():
    """2 GB with 2 worker processes: every element arrives (Beam 2.77 alone lost about 30%
    of them: local_runner.fix_runner_data_plane)."""
    opts = PipelineOptions(["--direct_num_workers", "2",
                            "--direct_running_mode", "multi_processing"])
    _delivered_across_a_side_input_boundary(opts, 2000, 1 << 20, delay=0.002)


def test_a_flag_is_one_field_its_parser_and_its_range_come_from():
    """A flag added to an args dataclass is parsed by Beam, shown by --help with its default,
    and range-checked, with nothing else written (here a class made for the test)."""
    from preprocessing.flags import at_least, flag

    @dataclasses.dataclass(frozen=True)
    class ProbeArgs:
        probe_rows: int = flag(7, "Rows a probe reads.", check=at_least(1))

    common_options.options_class(ProbeArgs, "ProbeOptions", __name__)
    parsed = common_options.typed_args("probe", ProbeArgs, PipelineOptions(["--probe_rows", "9"]))
    assert parsed == ProbeArgs(probe_rows=9)
    assert common_options.typed_args("probe", ProbeArgs, PipelineOptions([])).probe_rows == 7
    with pytest.raises(SystemExit) as e:
        common_options.typed_args("probe", ProbeArgs, PipelineOptions(["--probe_rows=0"]))
    assert e.value.code == "probe: error: --probe_rows must be >= 1, got 0"


def test_each_flag_is_declared_once_across_the_jobs():
    """The jobs' parsers are made from beam_jobs/shared/args.py: every flag a job parses is a
    field of its args class, with the same default (no second copy to keep in step)."""
    import argparse

    from preprocessing import flags
    for job, cls in JOB_ARGS.items():
        parser = argparse.ArgumentParser(add_help=False)
        flags.add_arguments(parser, cls)
        assert vars(parser.parse_args([])) == {f.name: flags.default_of(f)
                                               for f in dataclasses.fields(cls)}, job


@pytest.mark.parametrize("job", ["preprocess", "batch_predict", "stream_predict", "redrive"])
@pytest.mark.parametrize("flags, says", [
    ([], "needs --project and --region"),
    (["--project", "p"], "needs --region"),
    (["--project", "p", "--region", "r"], "needs --temp_location gs://BUCKET/tmp"),
    (["--project", "p", "--region", "r", "--temp_location", "/tmp/x"],
     "--temp_location /tmp/x: Dataflow's workers read Cloud Storage"),
])
def test_dataflow_runs_name_their_missing_settings_at_launch(job, flags, says):
    """Before: no check; without credentials the launch retried for ~2 minutes, then a
    traceback ("Missing required option: project")."""
    from beam_jobs.shared import common_options
    from beam_jobs.shared.errors import JobError
    with pytest.raises(JobError) as e:
        common_options.job_options(["--runner", "DataflowRunner", *flags], job,
                                   JOB_ARGS[job], "")
    assert says in e.value.message and "\n" not in e.value.message
