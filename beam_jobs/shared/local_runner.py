"""The local runner jobs use when none is named: Beam's FnApiRunner (what the DirectRunner
picks for these pipelines) without the DirectRunner's first step, which downloads the Prism
runner from the internet (a firewalled machine waits on it), plus two fixes to its data
plane."""
from __future__ import annotations

import logging
import sys
import threading

import apache_beam as beam
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

LOCAL_RUNNER = "beam_jobs.shared.local_runner.LocalRunner"
STREAMING_RUNNER = "beam_jobs.shared.local_streaming.LocalStreamingRunner"  # the streaming job's
LOCAL_RUNNERS = (None, "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner",
                 "PrismRunner", "PortableRunner", "FnApiRunner", "LocalRunner", "TestPipeline",
                 "LocalStreamingRunner")


def is_local_runner(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, (str, type(None))) else type(runner).__name__
    return name in LOCAL_RUNNERS or name in (LOCAL_RUNNER, STREAMING_RUNNER)


def runner_name(options: PipelineOptions) -> str:
    """The runner's class name (`LocalRunner`, `DataflowRunner`), as a summary names it."""
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, (str, type(None))) else type(runner).__name__
    return str(name or "DirectRunner").rsplit(".", 1)[-1]


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


WORKER_MODULE = "beam_jobs.shared.local_worker"


def _fast_exit_runner(provision_info):
    """An FnApiRunner whose multi-process workers run beam_jobs/shared/local_worker.py (Beam's
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
