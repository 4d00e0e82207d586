"""preprocessing/files/reading.py: ReadChunks (whole files record by record, or CSV byte
blocks) under TestPipeline + assert_that, with the preprocess job's parse step after it."""
import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import preprocess_steps as pp
from beam_jobs.shared.local_runner import LocalRunner
from preprocessing import TAXI_SPEC
from preprocessing.accounting import counting
from preprocessing.contract.schema import Schema
from preprocessing.files.reading import ReadChunks


@pytest.mark.parametrize("block_bytes", [None, 2 << 20], ids=["records", "blocks"])
def test_a_stray_quote_on_the_first_row_costs_that_row_only(tmp_path, block_bytes):
    """An opening quote that never closes on the first data row: that row is an
    unterminated_quote dead letter at its line, and reading goes on with the next line (the
    other 299 rows all parsed). Was a whole preprocess run per case."""
    from tools.datagen import write_csv
    src = str(tmp_path / "quote.csv")
    write_csv(src, 300, seed=21, dirty_fraction=0.0)
    lines = open(src).read().split("\n")
    fields = lines[1].split(",")
    fields[1] = '"' + fields[1]
    lines[1] = ",".join(fields)
    open(src, "w").write("\n".join(lines))
    with BeamTestPipeline(runner=LocalRunner()) as p:
        chunks, read_rejects, read_counts = p | ReadChunks("test", [src],
                                                          block_bytes=block_bytes)
        parsed = chunks | beam.ParDo(pp.ParseAndSplit(Schema.load(TAXI_SPEC),
                                                      (0.8, 0.1, 0.1))).with_outputs(
            "rejects", counting.COUNTS, "train", "eval", "test")
        rows = ((parsed.train, parsed.eval, parsed.test) | beam.Flatten()
                | beam.Map(lambda rb: rb.num_rows) | beam.CombineGlobally(sum))
        dead = ((read_rejects, parsed.rejects) | "Dead" >> beam.Flatten()
                | beam.Map(lambda r: (json.loads(r)["line"], json.loads(r)["reason"])))
        read = ((read_counts, parsed[counting.COUNTS]) | "Counts" >> beam.Flatten()
                | beam.Filter(lambda kv: kv[0] == "rows_read") | beam.Map(lambda kv: kv[1])
                | "Read" >> beam.CombineGlobally(sum))
        assert_that(rows, equal_to([299]), label="rows_parsed")
        assert_that(dead, equal_to([(2, "unterminated_quote")]), label="dead_letter")
        assert_that(read, equal_to([300]), label="rows_read")
