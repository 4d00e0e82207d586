"""Typed records in flight: every PCollection one of our steps makes, in each job's graph
built with every optional branch on, has a declared element type that names what it holds.
Not Any, not a dict, and a bare tuple only where Beam's key-value contract asks for one (into
a GroupByKey, CoGroupByKey or keyed RunInference). The graphs are built, never run."""
import os
import typing

import apache_beam as beam
import pytest
from apache_beam.pipeline import PipelineVisitor
from apache_beam.testing.test_stream import TestStream as EventStream
from apache_beam.typehints import typehints

OURS = ("preprocessing", "inference", "beam_jobs", "training")
# Where a tuple or dict is a library's own contract: the consumer takes (key, value) pairs
# (Beam's grouping, keyed RunInference, Distinct's key) or dict rows (Beam's BigQuery sink).
CONTRACT_CONSUMERS = ("GroupByKey", "CoGroupByKey", "_CoGBKImpl", "RunInference",
                      "CombinePerKey", "Distinct", "WriteToBigQuery")
# tf.transform's own output: (transformed RecordBatch, passthrough columns by name).
LIBRARY_TYPES = ("Tuple[<class 'pyarrow.lib.RecordBatch'>, Dict[<class 'str'>, "
                 "<class 'pyarrow.lib.Array'>]]",)
# Per-run and per-window reports: JSON documents whose figures are their CombineFn's own
# accumulators and outputs (partials, then the figures a report or MonitoringRecord is made
# of; sources.json), not records in flight (docs/design.md).
REPORTS = ("Metrics", "Skew", "Shadow", "ShadowCompare", "Finalize", "TrainStatistics",
           "Report", "SkewPartials", "SlicePartials", "LabelledRows", "SliceMetrics",
           "Monitor", "Sources")


def _maker(node):
    """The module of the code a step runs: its PTransform's, its DoFn's or CombineFn's, or
    the function a Map or FlatMap wraps (held in the closure of Beam's wrapper)."""
    t = node.transform
    fn = getattr(t, "fn", None)
    wrapped = getattr(fn, "_fn", None)
    cells = [c.cell_contents for c in getattr(wrapped, "__closure__", None) or ()]
    for obj in [fn, wrapped, getattr(t, "combine_fn", None)] + cells:
        if obj is not None and (getattr(obj, "__module__", "") or "").split(".")[0] in OURS:
            return obj.__module__
    module = type(t).__module__
    return module if module.split(".")[0] in OURS else None


def _is_tuple(hint) -> bool:
    return isinstance(hint, typehints.TupleConstraint) or typing.get_origin(hint) is tuple


def _is_dict(hint) -> bool:
    return isinstance(hint, typehints.DictConstraint) or hint is dict or \
        typing.get_origin(hint) is dict


def untyped(p: beam.Pipeline) -> list:
    """(step, output, element type) of each PCollection of ours that is not a named type."""
    consumers: dict = {}
    nodes = []

    class Visit(PipelineVisitor):
        def enter_composite_transform(self, node):
            self.visit_transform(node)

        def visit_transform(self, node):
            if node.transform is None:
                return
            nodes.append(node)
            for pc in node.inputs:
                consumers.setdefault(id(pc), []).append(node)

    p.visit(Visit())
    # A PCollection's consumers: the outermost steps that read it (a CoGroupByKey, not the
    # Maps inside it that tag its inputs).
    # Reports (below) may read what they like: their input is checked where it is made.
    consumers = {pc: {type(n.transform).__name__ for n in readers if n.parent not in readers
                      and n.full_label.split("/")[0] not in REPORTS}
                 for pc, readers in consumers.items()}
    found = []
    for node in nodes:
        if not _maker(node) or node.full_label.split("/")[0] in REPORTS:
            continue
        for tag, pc in node.outputs.items():
            hint = pc.element_type
            if id(pc) not in consumers:  # read by no step: crosses no boundary
                continue
            if str(hint) in LIBRARY_TYPES:
                continue
            if hint is None or hint == typehints.Any or (
                    (_is_dict(hint) or _is_tuple(hint))
                    and not set(consumers[id(pc)]) <= set(CONTRACT_CONSUMERS)):
                found.append((node.full_label, tag, str(hint)))
    return found


@pytest.fixture(scope="module")
def export(trained):
    from inference.model import versions
    return versions.resolve_model_dir(trained[2]["export_dir"])


def test_preprocess_records_are_typed(tmp_path):
    from beam_jobs import preprocess
    from beam_jobs.preprocess_config import PreprocessSink, PreprocessSource
    from preprocessing.features.transform import make_preprocessing_fn
    from tests.beam_jobs.test_build_pipeline import SCHEMA
    out = str(tmp_path / "out")
    p = beam.Pipeline()
    preprocess.build_pipeline(p, preprocess.PreprocessConfig(
        SCHEMA, make_preprocessing_fn(SCHEMA), str(tmp_path / "tft"),
        PreprocessSource("in.csv", ("in.csv",), (0.8, 0.1, 0.1)),
        PreprocessSink(out, os.path.join(out, "_staging-0-t"))))
    assert untyped(p) == []


def test_preprocess_image_records_are_typed(tmp_path):
    from beam_jobs import preprocess
    from beam_jobs.preprocess_config import ImageSplits, PreprocessSink, PreprocessSource
    from preprocessing.features.transform import make_preprocessing_fn
    from preprocessing.schema_inference.infer import image_schema
    schema, out = image_schema(), str(tmp_path / "out")
    p = beam.Pipeline()
    preprocess.build_pipeline(p, preprocess.PreprocessConfig(
        schema, make_preprocessing_fn(schema), str(tmp_path / "tft"),
        PreprocessSource("labels.csv", ("labels.csv",), images=ImageSplits(True)),
        PreprocessSink(out, os.path.join(out, "_staging-0-t"))))
    assert untyped(p) == []


def test_batch_predict_image_records_are_typed(export, tmp_path):
    """The image branch of the graph (its model is not loaded: the graph is only built)."""
    import dataclasses

    from beam_jobs import batch_predict
    from beam_jobs.batch_predict_config import Images
    cfg = _batch_config(export, tmp_path)
    p = beam.Pipeline()
    batch_predict.build_pipeline(p, dataclasses.replace(cfg, source=dataclasses.replace(
        cfg.source, images=Images("image", ("list.csv",), ("images/*/*.jpg",)))))
    assert untyped(p) == []


def test_batch_predict_records_are_typed(export, tmp_path):
    from beam_jobs import batch_predict
    p = beam.Pipeline()
    batch_predict.build_pipeline(p, _batch_config(export, tmp_path))
    assert untyped(p) == []


def _batch_config(export, tmp_path):
    """Every optional branch on: labels, slices, skew, a shadow, both file formats."""
    from beam_jobs import batch_predict
    from beam_jobs.batch_predict_config import Model, Reports, Sink, Source
    from beam_jobs.shared import common_options
    from inference.model import versions
    from inference.skew import load_train_statistics
    from preprocessing.reference.slices import Slicer
    schema = versions.load_raw_schema(export)
    stats = load_train_statistics(export)
    args = batch_predict.parse_args(["--model_dir", export, "--input", "x", "--output", "y"])
    out = str(tmp_path / "pred")
    return batch_predict.BatchPredictConfig(
        schema, Source("in.csv", ("in.csv",), key=schema.key),
        Model(export, export, "1", shadow_path=export),
        Sink(out, os.path.join(out, "_staging-0-t"), "2026-11-29", output_format="both"),
        Reports(schema.label, (0.0, 100.0), Slicer.of(["payment_type"], schema, stats),
                common_options.train_statistics(args, export, stats, schema)))


def test_stream_predict_records_are_typed(export, tmp_path):
    from beam_jobs import stream_predict
    from beam_jobs.shared import common_options
    from beam_jobs.stream_predict_config import (
        Monitoring,
        StreamModel,
        StreamSinks,
        StreamSource,
    )
    from inference.model import versions
    from inference.skew import load_train_statistics
    from preprocessing.reference.slices import Slicer
    schema = versions.load_raw_schema(export)
    stats = load_train_statistics(export)
    args = stream_predict.parse_args(["--streaming", "--model_dir", export, "--input_topic",
                                      "projects/test-project/topics/in", "--output_dir", "o"])
    p = beam.Pipeline()
    stream_predict.build_pipeline(p, stream_predict.StreamPredictConfig(
        schema, StreamSource(EventStream(), "projects/test-project/topics/in"),
        StreamModel(export, export, shadow_path=export),
        StreamSinks(output_dir=str(tmp_path / "o"), dead_letter_dir=str(tmp_path / "d"),
                    monitoring_dir=str(tmp_path / "m")),
        Monitoring(train_statistics=common_options.train_statistics(args, export, stats,
                                                                    schema),
                   slicer=Slicer.of(["payment_type"], schema, stats))))
    assert untyped(p) == []


def test_redrive_records_are_typed(export, tmp_path):
    from beam_jobs import redrive
    from inference.model import versions
    out = str(tmp_path / "out")
    p = beam.Pipeline()
    redrive.build_pipeline(p, redrive.RedriveConfig(
        output=out, rejects=os.path.join(out, "rejects", "*.jsonl"), fixed="fixed.jsonl",
        model_dir=export, model_path=export, schema=versions.load_raw_schema(export),
        staging=os.path.join(out, "_staging-0-t"), key="key", passthrough=(), label=None,
        prediction_files=("p.jsonl",), csv_files=("p.csv",), previous={},
        headers={"in.csv": ("a", "b")}))
    assert untyped(p) == []


def test_the_walk_finds_an_untyped_record():
    """The check itself: a dict made by one of our functions is found."""
    from preprocessing.accounting.rejects import DeadLetter
    p = beam.Pipeline()
    letters = p | beam.Create([DeadLetter("job", "in.csv", 1, "x", "bad_row", "")]).with_output_types(
        DeadLetter)
    _ = letters | "AsDict" >> beam.Map(DeadLetter.to_dict) | "Keys" >> beam.Map(len)
    _ = letters | "Typed" >> beam.Map(DeadLetter.to_json).with_output_types(str) \
        | "Lengths" >> beam.Map(len)
    assert [label for label, _, _ in untyped(p)] == ["AsDict"]

