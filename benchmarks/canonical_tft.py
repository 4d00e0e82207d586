"""The canonical tf.transform pattern, as tf.transform's census example writes it, over the
same CSV and the same transforms as the preprocess job: the peer benchmarks/preprocess_csv.py
measures the job against.

ReadFromText -> BeamRecordCsvTFXIO -> AnalyzeAndTransformDataset(output_record_batches=True)
-> EncodeTransformedDataset -> WriteToTFRecord (gzip). No validation, no split, no dead
letters: it needs clean data (a malformed row stops it).

    python -m benchmarks.canonical_tft --input taxi.csv --output out/canonical \\
        [--direct_num_workers 2 --direct_running_mode multi_processing]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None) -> None:
    import apache_beam as beam
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from tfx_bsl.public import tfxio

    from preprocessing import TAXI_SPEC
    from preprocessing.contract.schema import Schema
    from preprocessing.features.transform import make_preprocessing_fn
    from preprocessing.parsing.record_batches import raw_feature_spec

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--schema_spec", default=TAXI_SPEC)
    args, beam_args = ap.parse_known_args(argv)
    schema = Schema.load(args.schema_spec)
    with open(args.input) as f:
        columns = f.readline().strip().split(",")
    metadata = tft.DatasetMetadata.from_feature_spec(raw_feature_spec(schema))
    csv_tfxio = tfxio.BeamRecordCsvTFXIO(physical_format="text", column_names=columns,
                                         schema=metadata.schema)
    options = PipelineOptions(beam_args, runner="beam_jobs.shared.local_runner.LocalRunner")
    with beam.Pipeline(options=options) as p, \
            tft_beam.Context(temp_dir=tempfile.mkdtemp(prefix="canonical_tft_")):
        raw = (p | "Read" >> beam.io.ReadFromText(args.input, skip_header_lines=1,
                                                  coder=beam.coders.BytesCoder())
               | "Decode" >> csv_tfxio.BeamSource())
        transformed, transform_fn = (
            (raw, csv_tfxio.TensorAdapterConfig())
            | tft_beam.AnalyzeAndTransformDataset(make_preprocessing_fn(schema),
                                                  output_record_batches=True))
        _ = (transformed | "Encode" >> tft_beam.EncodeTransformedDataset()
             | "Write" >> beam.io.WriteToTFRecord(os.path.join(args.output, "part"),
                                                  file_name_suffix=".tfrecord.gz"))
        _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(args.output)


if __name__ == "__main__":
    main()
