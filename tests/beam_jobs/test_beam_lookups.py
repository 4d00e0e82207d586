"""beam_jobs/shared/beam_lookups.py: Beam's DoFn-state and options-view lookups, answered
once, answer as Beam does."""
from __future__ import annotations

import gc
import inspect

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions
from apache_beam.runners.direct import transform_evaluator as te
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.core import CallableWrapperDoFn
from apache_beam.transforms.timeutil import TimeDomain

from beam_jobs.shared import beam_lookups


class _Buffered(beam.DoFn):
    """Sums each key's values in state and emits the sum when the watermark passes."""
    TOTAL = userstate.ReadModifyWriteStateSpec("total", VarIntCoder())
    FLUSH = userstate.TimerSpec("flush", TimeDomain.WATERMARK)

    def process(self, kv, total=beam.DoFn.StateParam(TOTAL), flush=beam.DoFn.TimerParam(FLUSH),
                window=beam.DoFn.WindowParam):
        total.write((total.read() or 0) + kv[1])
        flush.set(window.end)

    @userstate.on_timer(FLUSH)
    def emit(self, key=beam.DoFn.KeyParam, total=beam.DoFn.StateParam(TOTAL)):
        yield key, total.read()


def test_beam_still_asks_where_the_lookups_answer():
    """Fails when a Beam upgrade changes the lookups replaced (review beam_lookups.py then)."""
    beam_specs = getattr(userstate, "_beam_get_dofn_specs", userstate.get_dofn_specs)
    assert "for method_name in dir(dofn)" in inspect.getsource(beam_specs)
    assert "get_dofn_specs(dofn)" in inspect.getsource(userstate.validate_stateful_dofn)
    assert "is_stateful_dofn(dofn)" in inspect.getsource(te._ParDoEvaluator.start_bundle)
    view_as = getattr(PipelineOptions, "_beam_view_as", PipelineOptions.view_as)
    assert "view._all_options = self._all_options" in inspect.getsource(view_as)


def test_cached_dofn_specs_answer_as_beam_does_and_never_cache_state():
    beam_lookups.install()
    beam_lookups.install()  # idempotent
    beam_specs = userstate._beam_get_dofn_specs

    class Plain(beam.DoFn):
        def process(self, x, ts=beam.DoFn.TimestampParam):
            yield x

    dofns = [_Buffered(), Plain(), CallableWrapperDoFn(lambda x: x),
             CallableWrapperDoFn(lambda x, y=3: x + y)]
    for _ in range(3):  # the second and third answers come from the cache
        for dofn in dofns:
            assert userstate.get_dofn_specs(dofn) == beam_specs(dofn)
            assert te.is_stateful_dofn(dofn) == isinstance(dofn, _Buffered)
    assert {s.name for s in userstate.get_dofn_specs(_Buffered())[0]} == {"total"}
    assert (_Buffered, None, (), ()) not in beam_lookups._NOT_STATEFUL
    assert (Plain, None, (), ()) in beam_lookups._NOT_STATEFUL


def test_a_view_is_beams_and_writes_through_one_view_are_seen_by_the_others():
    beam_lookups.install()
    options = PipelineOptions(["--project", "p1", "--runner", "DirectRunner"])
    view = options.view_as(GoogleCloudOptions)
    fresh = PipelineOptions._beam_view_as(options, GoogleCloudOptions)
    assert options.view_as(GoogleCloudOptions) is view  # built once
    assert view.get_all_options() == fresh.get_all_options()
    view.project = "p2"
    assert fresh.project == "p2" and options.view_as(GoogleCloudOptions).project == "p2"
    assert options.view_as(StandardOptions).runner == "DirectRunner"
    key = id(options)
    assert key in beam_lookups._VIEWS
    del options, view, fresh
    gc.collect()
    assert key not in beam_lookups._VIEWS  # the views go with their options


def test_a_stateful_dofn_runs_with_the_lookups_installed():
    beam_lookups.install()
    with BeamTestPipeline() as p:
        sums = p | beam.Create([("a", 1), ("a", 2), ("b", 5)]) | beam.ParDo(_Buffered())
        assert_that(sums, equal_to([("a", 3), ("b", 5)]))
