"""The shared job runtime: options every job reads, the local runner, logging, progress lines,
in-graph tallies, and the few filesystem helpers the launch step and the finalize step use."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import threading
import time
import types
from typing import List, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

# The runner jobs use when none is named: Beam's DirectRunner without its first step, which
# downloads the Prism runner from the internet (a firewalled machine waits on it).
LOCAL_RUNNER = "beam_jobs.runtime.LocalRunner"
LOCAL_RUNNERS = (None, "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner",
                 "PrismRunner", "PortableRunner", "FnApiRunner", "LocalRunner", "TestPipeline")
COUNTS = "counts"  # the tagged output carrying (name, n) tallies to the finalize step
PROGRESS_SECS = float(os.environ.get("TFDATAFLOW_PROGRESS_SECS", "10"))


class JobError(SystemExit):
    """A bad argument or input found before the pipeline starts: one line, exit status 2."""

    def __init__(self, job: str, message: str):
        super().__init__(f"{job}: error: {message}")
        self.job = job
        self.message = message


STALE_STAGING_HOURS = 24.0  # default of --stale_staging_hours (beam_jobs/finalize.py)


# ---- options -------------------------------------------------------------------------------------
class IOOptions(PipelineOptions):
    """Flags every job shares. Beam registers all PipelineOptions subclasses in one parser,
    so a flag may be defined once only: jobs read these through `merged_options`."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--input", help="Input path or glob (local or gs://); "
                            "comma-separate several. Required.")
        parser.add_argument("--output", help="Output directory (local or gs://). Required. "
                            "What an earlier run wrote there is replaced when this run "
                            "succeeds (never before).")
        parser.add_argument("--key_column", help="Column identifying a row (default: the "
                            "schema's key).")
        parser.add_argument("--max_record_bytes", type=int, default=1 << 20,
                            help="CSV/JSON lines: a longer line is rejected (record_too_large) "
                                 "and a quoted field may span at most this many bytes.")
        parser.add_argument("--max_record_lines", type=int, default=1000,
                            help="CSV: a quoted field may span at most this many lines; past "
                                 "that its first line is rejected (unterminated_quote) and "
                                 "reading resumes on the next line.")
        parser.add_argument("--csv_block_mb", type=float, default=2.0,
                            help="CSV files are read in blocks of this many MB and parsed "
                                 "column-wise with Arrow (the same rows, values and rejects "
                                 "as record by record); 0: record by record.")
        parser.add_argument("--stale_staging_hours", type=float, default=STALE_STAGING_HOURS,
                            help="Batch jobs: a `_staging-*` folder under --output whose run "
                                 "started longer ago than this is a killed run's and is removed "
                                 "when a run finishes; a younger one may be a live run's.")
        parser.add_argument("--log_level", default="WARNING",
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                            help="Log level (default WARNING: progress lines and the summary "
                                 "only; INFO shows Beam's own log).")


class ModelOptions(PipelineOptions):
    """Flags of the jobs that run the exported model."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--model_dir", help="An export dir, or the base holding numeric "
                            "versions (the newest is used). Required.")
        parser.add_argument("--min_batch_size", type=int, default=32,
                            help="Smallest batch RunInference forms.")
        parser.add_argument("--max_batch_size", type=int, default=1024,
                            help="Largest batch RunInference forms.")
        parser.add_argument("--output_table", help="Also write predictions to BigQuery "
                            "PROJECT:DATASET.TABLE (batch: the run date's day partition, "
                            "replaced on a re-run; streaming: appended).")


class ImageOptions(PipelineOptions):
    """Image normalisation flags: preprocess applies them to training images, and the
    prediction jobs apply the same ones to the images they score (no train/serve skew)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--max_side", type=int, default=256,
                            help="images: longest side after resizing (aspect kept).")
        parser.add_argument("--jpeg_quality", type=int, default=90,
                            help="images: JPEG quality of the re-encoded images.")
        parser.add_argument("--max_pixels", type=int, default=50_000_000,
                            help="images: larger images are rejected (decompression bombs).")
        parser.add_argument("--max_image_bytes", type=int, default=64 << 20,
                            help="images: larger files are rejected (image_too_large); only "
                                 "this much of a file is ever read.")


def check_image_options(job: str, o) -> None:
    if (o.max_side < 8 or not 1 <= o.jpeg_quality <= 100 or o.max_pixels < 1
            or o.max_image_bytes < 1):
        raise JobError(job, "need --max_side >= 8, 1 <= --jpeg_quality <= 100, --max_pixels >= 1, "
                            "--max_image_bytes >= 1")


def args_dataclass(name: str, option_classes) -> type:
    """A frozen dataclass with one typed field per flag the option classes define (their
    argparse dests, types and defaults): a job's typed config, checked without I/O."""
    parser = argparse.ArgumentParser(add_help=False)
    for cls in option_classes:
        cls._add_argparse_args(parser)
    fields = []
    for a in parser._actions:
        kind = a.type if isinstance(a.type, type) else str
        fields.append((a.dest, Optional[kind], dataclasses.field(default=a.default)))
    return dataclasses.make_dataclass(name, fields, frozen=True)


def typed_args(cls: type, options: PipelineOptions, option_classes, **overrides):
    """An `args_dataclass` instance from parsed PipelineOptions."""
    merged = merged_options(options, *option_classes)
    values = {f.name: getattr(merged, f.name) for f in dataclasses.fields(cls)}
    values.update(overrides)
    return cls(**values)


def check_record_bounds(job: str, o) -> None:
    if o.max_record_bytes < 1 or o.max_record_lines < 1:
        raise JobError(job, "need --max_record_bytes >= 1 and --max_record_lines >= 1")
    if o.stale_staging_hours < 0:
        raise JobError(job, "need --stale_staging_hours >= 0")
    if o.csv_block_mb < 0:
        raise JobError(job, "--csv_block_mb must be >= 0")


def merged_options(options: PipelineOptions, *classes):
    """One namespace with the attributes of several option views (see IOOptions)."""
    merged = {}
    for cls in classes:
        merged.update(options.view_as(cls).get_all_options(drop_default=False,
                                                           retain_unknown_options=False))
    return types.SimpleNamespace(**merged)


def job_options(argv, job: str, options_cls, doc: str, shared=(),
                local_runner: str = LOCAL_RUNNER) -> PipelineOptions:
    """PipelineOptions from argv; `--help` prints the job's options and the usual Beam ones.
    With no --runner (or DirectRunner), `local_runner` is named explicitly: no download.

    (Beam's own --help handling shows an empty parser, because options are parsed lazily.)
    """
    from apache_beam.options import pipeline_options as po
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        parser = argparse.ArgumentParser(
            prog=f"python -m beam_jobs.{job}", description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        group = parser.add_argument_group(f"{job} options")
        for cls in tuple(shared) + (options_cls,):
            cls._add_argparse_args(group)
        for cls in (po.StandardOptions, po.DirectOptions, po.GoogleCloudOptions,
                    po.WorkerOptions, po.SetupOptions):
            cls._add_argparse_args(parser.add_argument_group(f"Beam {cls.__name__}"))
        parser.print_help()
        raise SystemExit(0)
    options = PipelineOptions(args)
    standard = options.view_as(StandardOptions)
    if standard.runner in (None, "DirectRunner"):
        standard.runner = local_runner
    setup_logging(options.view_as(IOOptions).log_level)
    return options


def is_local_runner(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, (str, type(None))) else type(runner).__name__
    return name in LOCAL_RUNNERS or name == LOCAL_RUNNER


class LocalRunner(beam.runners.PipelineRunner):
    """Beam's DirectRunner for batch jobs, minus its attempt to download Prism: the
    FnApiRunner (honours --direct_num_workers / --direct_running_mode multi_processing), as
    the DirectRunner picks it for these pipelines."""

    def run_pipeline(self, pipeline, options):
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return _fast_exit_runner(info).run_pipeline(pipeline, options)


WORKER_MODULE = "beam_jobs.local_worker"


def _fast_exit_runner(provision_info):
    """An FnApiRunner whose multi-process workers run beam_jobs/local_worker.py (Beam's
    harness, then an immediate exit) instead of sdk_worker_main itself."""
    from apache_beam.portability import python_urns
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    class FastExitFnApiRunner(fn_runner.FnApiRunner):
        def run_via_runner_api(self, pipeline_proto, options):
            for env in pipeline_proto.components.environments.values():
                if env.urn == python_urns.SUBPROCESS_SDK and env.payload.endswith(
                        b"-m apache_beam.runners.worker.sdk_worker_main"):
                    env.payload = f"{sys.executable} -m {WORKER_MODULE}".encode()
            return super().run_via_runner_api(pipeline_proto, options)

    fix_runner_data_plane()
    return FastExitFnApiRunner(provision_info=provision_info)


def fix_runner_data_plane() -> None:
    """Two fixes to how Beam's FnApiRunner (2.77) feeds a bundle's input to a gRPC worker
    (multi_processing or multi_threading mode); idempotent, for this process's runners.

    1. Lost input. The runner writes the input into a stream that another thread flushes
       every second. A flush holds a lock while it takes the buffer, hands it to the send
       queue (which blocks when 100 MB are queued) and clears the buffer; `write` took no
       lock, so what was written while a flush waited was cleared unsent. A 5M-row
       preprocess with 2 worker processes lost 2-6% of its train split this way, different
       rows each run (the reconciliation caught it). Writes now take the flush's lock.
    2. A stalled bundle. The runner sent a bundle's whole input before asking the worker to
       run it, so an input larger than the data plane's buffers (~300 MB, once every flush
       is delivered) waited for a worker that was never told to start. The input is now
       sent by a thread of its own while the bundle runs, in pieces of about 10 MB.
    """
    from apache_beam.coders.coder_impl import create_OutputStream
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.worker import data_plane

    stream = data_plane.TimeBasedBufferingClosableOutputStream
    if not getattr(stream, "_writes_locked", False):
        base_write = type(create_OutputStream()).write  # the Cython OutputStream's own

        def write(self, b, nested=False):
            with self._flush_lock:
                base_write(self, b, nested)

        stream.write = write
        stream._writes_locked = True

    manager = fn_runner.BundleManager
    if not getattr(manager, "_inputs_streamed", False):
        send_whole = manager._send_input_to_worker

        def send_input(self, process_bundle_id, read_transform_id, byte_streams):
            data_conn = self._worker_handler.data_conn
            if isinstance(data_conn, data_plane.InMemoryDataChannel):
                # In one process the worker runs the bundle as soon as it is asked, from
                # what it holds by then: its input goes first, as before.
                return send_whole(self, process_bundle_id, read_transform_id, byte_streams)
            data_out = data_conn.output_stream(process_bundle_id, read_transform_id)
            blobs = list(byte_streams or [])

            def send():
                try:
                    for blob in blobs:
                        data_out.write(blob)
                        data_out.maybe_flush()
                    data_out.close()
                except Exception:  # the worker is gone: the bundle fails on its own
                    logging.exception("sending %s's input to a local worker failed",
                                      process_bundle_id)

            threading.Thread(target=send, name=f"send-{process_bundle_id}",
                             daemon=True).start()

        manager._send_input_to_worker = send_input
        manager._inputs_streamed = True


# ---- logging and progress ------------------------------------------------------------------------
def setup_logging(level: str = "WARNING") -> None:
    """Quiet by default: the job's progress lines and summary, warnings and errors. Beam's
    INFO log (and its workers' start-up notices) with --log_level INFO."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root.setLevel(level)
    if not any(isinstance(f, _KnownNoise) for f in root.filters):
        root.addFilter(_KnownNoise())
    # Local multi-process workers forward every notice as a WARNING; keep their errors.
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(
        "ERROR" if logging.getLevelName(level) >= logging.WARNING else level)


def exit_now(code: int = 0) -> None:
    """Flushes the logs and ends the process at once, skipping the interpreter's teardown.

    With TensorFlow, gRPC and a run's buffers loaded, that teardown takes ~2 s of a job's
    wall time (1.5-2.5 s measured at the end of a 1M-row preprocess) and does nothing a
    finished job needs: by now every output is written, renamed and reported. Used by the
    jobs' command lines after run() returns and by the local worker processes; never by
    run() itself, which tests call in-process.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class _KnownNoise(logging.Filter):
    """Drops one harmless warning per batch: Beam's RunInference cannot read its memory metric
    when its optional model manager fails to import (it needs torch), and says so each time."""

    def filter(self, record):
        return not str(record.msg).startswith("Resource module is not available")


def emit(line: str) -> None:
    """A line for the person running the job (stderr: worker processes' stderr reaches the
    console locally and Cloud Logging on Dataflow)."""
    print(line, file=sys.stderr, flush=True)


class Progress:
    """'<job>: <what> <n> (<rate>/s[, <pct> of <total>, ETA <s>])' at most every
    PROGRESS_SECS per process, and at the end of each file or split. Shared by a process's
    threads: get one with `Progress.of(job, what, total)`."""

    _all: dict = {}
    _lock = threading.Lock()

    def __init__(self, job: str, what: str, total: Optional[float], unit: str):
        self.job, self.what, self.total, self.unit = job, what, total, unit
        self.done, self.started, self.last = 0.0, time.time(), time.time()

    @classmethod
    def of(cls, job: str, what: str, total: Optional[float] = None, unit: str = "rows"):
        with cls._lock:
            key = (job, what, unit)  # one counter per unit: rows and MB never mix
            if key not in cls._all:
                cls._all[key] = cls(job, what, total, unit)
            return cls._all[key]

    def add(self, n: float) -> None:
        with self._lock:
            self.done += n
            now = time.time()
            if now - self.last < PROGRESS_SECS:
                return
            self.last = now
        emit(self.line(now))

    def show(self) -> None:
        """Prints the line now (the end of a file or split)."""
        with self._lock:
            self.last = time.time()
        emit(self.line(self.last))

    def line(self, now: Optional[float] = None) -> str:
        elapsed = max((now or time.time()) - self.started, 1e-9)
        rate = self.done / elapsed
        scale, unit = (1e6, "MB") if self.unit == "bytes" else (1, self.unit)
        text = f"{self.job}: {self.what} {self.done / scale:,.0f} {unit} ({rate / scale:,.1f} {unit}/s"
        if self.total:
            left = max(self.total - self.done, 0) / rate if rate > 0 else float("inf")
            text += (f", {100 * self.done / self.total:.0f}% of {self.total / scale:,.0f} {unit}"
                     f", ETA {left:,.0f} s")
        return text + ")"


class Tally:
    """Counts rows twice: a Beam metric (live in the runner's UI), and a (name, n) element on
    the COUNTS output that the finalize step sums in the graph (Dataflow's launcher never
    reads metrics after a template launch)."""

    def __init__(self, job: str):
        self.job = job
        self._metrics = {}

    def __call__(self, name: str, n: int = 1):
        metric = self._metrics.get(name)
        if metric is None:
            metric = self._metrics[name] = Metrics.counter(self.job, name)
        metric.inc(n)
        return beam.pvalue.TaggedOutput(COUNTS, (name, n))


# ---- files -------------------------------------------------------------------------------------
def is_remote_path(path: str) -> bool:
    return "://" in path


def split_patterns(text: str) -> List[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def match_by_pattern(patterns: Sequence[str]) -> List[List[str]]:
    """The files each pattern matches (one listing per pattern)."""
    return [[m.path for m in result.metadata_list]
            for result in FileSystems.match(list(patterns))]


def match_files(patterns: Sequence[str]) -> List[str]:
    """All files matching the patterns, sorted; an empty list if none do."""
    return sorted({f for files in match_by_pattern(patterns) for f in files})


def total_size(patterns: Sequence[str]) -> Optional[int]:
    """Bytes in the files the patterns match (for progress ETAs), one listing per pattern
    (not one request per file); None when sizes cannot be read."""
    try:
        sizes = {m.path: m.size_in_bytes for r in FileSystems.match(list(patterns))
                 for m in r.metadata_list}
        return sum(sizes.values())
    except Exception:
        return None


def check_writable(job: str, output: str) -> None:
    """Fails fast when the output location cannot be written."""
    probe = FileSystems.join(output, ".write_probe")
    try:
        if not is_remote_path(output):
            os.makedirs(output, exist_ok=True)
        with FileSystems.create(probe) as f:
            f.write(b"ok")
        FileSystems.delete([probe])
    except Exception as e:  # the filesystem's own error text names the cause
        raise JobError(job, f"output {output} is not writable: {str(e).splitlines()[0][:300]}")


class UnreadableInput(OSError):
    """An input that is not a regular file (a device, a pipe, a folder) or that this process
    may not read: reading it could block or never end, and a retry cannot help."""


def is_readable_input(path: str) -> bool:
    """False for a local path `open_input` refuses (UnreadableInput); remote paths: True."""
    try:
        open_input(path).close()
        return True
    except UnreadableInput:
        return False
    except Exception:  # the read itself reports other problems
        return True


def open_input(path: str):
    """A binary file object for an input file (any Beam filesystem), decompressed by its
    extension (.gz, .bz2) with Python's streaming readers: reads are bounded by what is asked
    (a decompression bomb never expands past it), and a cut or corrupt file raises (EOFError,
    OSError) instead of ending early as if complete. Raises UnreadableInput for a local path
    that is not a regular file (`/dev/zero` never ends, a FIFO blocks) or is not readable."""
    import bz2
    import gzip
    import stat

    from apache_beam.io.filesystem import CompressionTypes
    if not is_remote_path(path):
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # follows symlinks
                raise UnreadableInput(f"{path} is not a regular file")
        except (PermissionError, FileNotFoundError) as e:
            raise UnreadableInput(f"{path}: {e.strerror}") from None
    try:
        raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except PermissionError as e:
        raise UnreadableInput(f"{path}: {e.strerror}") from None
    kind = CompressionTypes.detect_compression_type(path)
    if kind == CompressionTypes.GZIP:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == CompressionTypes.BZIP2:
        return bz2.BZ2File(raw, mode="rb")
    return raw


def read_head(path: str, max_bytes: int = 1 << 20) -> str:
    """The first ~max_bytes of a (possibly compressed) text file, cut at a line end."""
    parts, size = [], 0
    with open_input(path) as f:
        try:
            while size < max_bytes:
                part = f.readline(max_bytes - size)  # by lines: a cut loses one only
                if not part:
                    break
                parts.append(part)
                size += len(part)
        except EOFError:  # a cut compressed file: its head is still its head (the job
            pass          # itself reports the cut)
    data = b"".join(parts)
    text = data.decode("utf-8", errors="replace")
    if len(data) == max_bytes and "\n" in text:
        text = text[: text.rindex("\n") + 1]
    return text


def write_text(path: str, text: str) -> None:
    if not is_remote_path(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with FileSystems.create(path) as f:
        f.write(text.encode("utf-8"))


def read_text(path: str) -> str:
    with FileSystems.open(path) as f:
        return f.read().decode("utf-8")


def copy_local_tree(src_dir: str, dst_dir: str) -> None:
    """Copies a local directory to any Beam filesystem (gs:// included) file by file."""
    import shutil
    for root, _, files in os.walk(src_dir):
        rel = os.path.relpath(root, src_dir)
        for name in files:
            dst = FileSystems.join(dst_dir, *([] if rel == "." else rel.split(os.sep)), name)
            with open(os.path.join(root, name), "rb") as src, FileSystems.create(dst) as out:
                shutil.copyfileobj(src, out)


def local_tmp_dir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix)


def dumps_json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def wait_and_read_summary(result, template: Optional[str], output: str) -> Optional[dict]:
    """What `run()` does after `p.run()`: nothing more than wait (unless only a template was
    built) and read the summary the pipeline's finalize step wrote."""
    if template:
        emit(f"Built the job's template at {template}; the job publishes its own outputs.")
        return None
    result.wait_until_finish()
    return json.loads(read_text(FileSystems.join(output, "summary.json")))
