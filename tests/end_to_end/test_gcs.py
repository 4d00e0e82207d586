"""gs:// round trip against a real local GCS emulator: CSV in from, TFRecords out to, GCS."""
import json
import os

import pytest

from beam_jobs import preprocess
from preprocessing import TAXI_SPEC
from tests.helpers import read_examples


@pytest.mark.slow
def test_preprocess_reads_and_writes_gcs(gcs_emulator, taxi_csv, tmp_path):
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    src, stats = taxi_csv
    with open(src, "rb") as f, FileSystems.create("gs://test-bucket/raw/taxi.csv") as out:
        out.write(f.read())
    summary = preprocess.run(["--input", "gs://test-bucket/raw/*.csv",
                              "--output", "gs://test-bucket/prep", "--schema_spec", TAXI_SPEC,
                              "--num_shards", "2"])
    assert summary["rows_read"] == stats.rows and summary["reconciled"]

    # Everything the job writes is in the bucket: shards, transform output, summary, rejects.
    listed = [m.path for m in FileSystems.match(["gs://test-bucket/prep/**"])[0].metadata_list]
    local = tmp_path / "copy"
    for path in listed:
        rel = path[len("gs://test-bucket/prep/"):]
        os.makedirs(local / os.path.dirname(rel), exist_ok=True)
        # Raw bytes: Beam would otherwise gunzip the .gz shards on the way.
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            (local / rel).write_bytes(f.read())
    assert (local / "transform_fn" / "saved_model.pb").exists()
    assert sorted(p.name for p in (local / "train").iterdir()) == [
        "part-00000-of-00002.tfrecord.gz", "part-00001-of-00002.tfrecord.gz"]
    on_gcs = json.loads((local / "summary.json").read_text())
    assert on_gcs["splits"] == summary["splits"]

    import tensorflow_transform as tft
    spec = tft.TFTransformOutput(str(local)).transformed_feature_spec()
    rows = sum(len(read_examples(str(local / s / "*.tfrecord.gz"), spec)["key"])
               for s in ("train", "eval", "test") if summary["splits"][s])
    assert rows == stats.clean_rows


@pytest.mark.slow
def test_batch_predict_reads_csv_blocks_from_gcs(gcs_emulator, trained, taxi_csv, tmp_path):
    """CSV blocks read as byte ranges (seek + read on gs://) predict what a local run does."""
    from apache_beam.io.filesystems import FileSystems

    from beam_jobs import batch_predict
    from tests.helpers import read_jsonl
    src, stats = taxi_csv
    with open(src, "rb") as f, FileSystems.create("gs://test-bucket/score/taxi.csv") as out:
        out.write(f.read())
    runs = []
    for inp, out in (("gs://test-bucket/score/*.csv", "gs://test-bucket/preds"),
                     (src, str(tmp_path / "local"))):
        s = batch_predict.run(["--model_dir", trained[2]["export_dir"], "--input", inp,
                               "--output", out, "--csv_block_mb", "0.02"])
        assert s["reconciled"] and s["rows_read"] == stats.rows
        runs.append(s)
    assert runs[0]["rows_predicted"] == runs[1]["rows_predicted"] > 0.95 * stats.rows
    assert runs[0]["rejected"] == runs[1]["rejected"] and runs[0]["rejected"]["total"] > 0
    local = tmp_path / "from_gcs"
    local.mkdir()
    for m in FileSystems.match(["gs://test-bucket/preds/predictions-*"])[0].metadata_list:
        with FileSystems.open(m.path) as f:
            (local / m.path.rsplit("/", 1)[1]).write_bytes(f.read())
    on_gcs = sorted((p["key"], p["prediction"]) for p in read_jsonl(str(local / "*.jsonl")))
    here = sorted((p["key"], p["prediction"])
                  for p in read_jsonl(str(tmp_path / "local" / "predictions-*.jsonl")))
    assert on_gcs == here
