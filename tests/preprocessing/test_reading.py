"""preprocessing/files/reading.py: ReadChunks (whole files record by record, or CSV byte
blocks) under TestPipeline + assert_that, with the preprocess job's parse step after it."""

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import preprocess_steps as pp
from beam_jobs.shared.local_runner import LocalRunner
from preprocessing import TAXI_SPEC
from preprocessing.accounting import counting
from preprocessing.contract.schema import Schema
from preprocessing.files import filesys
from preprocessing.files.reading import ReadChunks
from preprocessing.schema_inference.infer import parse_csv_sample


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
        rows, dead, _ = _parse(p, src, block_bytes)
        assert_that(rows, equal_to([299]), label="rows_parsed")
        assert_that(dead, equal_to([(2, "unterminated_quote")]), label="dead_letter")


def _parse(p, src, block_bytes):
    """ReadChunks -> ParseAndSplit over `src` (the taxi spec): (rows parsed, dead letters as
    (line, reason), headers the chunks carry)."""
    chunks, read_rejects, _ = p | ReadChunks("test", [src], block_bytes=block_bytes)
    parsed = chunks | beam.ParDo(pp.ParseAndSplit(Schema.load(TAXI_SPEC),
                                                  (0.8, 0.1, 0.1))).with_outputs(
        "rejects", counting.COUNTS, "train", "eval", "test")
    rows = ((parsed.train, parsed.eval, parsed.test) | beam.Flatten()
            | beam.Map(lambda rb: rb.num_rows) | beam.CombineGlobally(sum))
    dead = ((read_rejects, parsed.rejects) | "Dead" >> beam.Flatten()
            | beam.Map(lambda r: (r.line, r.reason)))
    headers = chunks | beam.Map(lambda c: c.header[0]) | beam.Distinct()
    return rows, dead, headers


@pytest.mark.parametrize("block_bytes", [None, 2 << 20], ids=["records", "blocks"])
def test_a_utf8_byte_order_mark_is_not_part_of_the_first_column(tmp_path, block_bytes):
    """A file saved with a BOM: the first column is still `key`, at launch (the header the
    job checks the spec against) and in the pipeline (every row parses). Was a whole
    preprocess run."""
    from tools.datagen import write_csv
    plain = str(tmp_path / "plain.csv")
    write_csv(plain, 300, seed=21, dirty_fraction=0.0)
    src = tmp_path / "bom.csv"
    src.write_text("\ufeff" + open(plain).read(), encoding="utf-8")
    header, _ = parse_csv_sample(filesys.read_head(str(src)), ",", 0)
    assert header[0] == "key"
    with BeamTestPipeline(runner=LocalRunner()) as p:
        rows, dead, headers = _parse(p, str(src), block_bytes)
        assert_that(rows, equal_to([300]), label="rows_parsed")
        assert_that(dead, equal_to([]), label="no_dead_letters")
        assert_that(headers, equal_to(["key"]), label="first_column")


def test_a_json_lines_file_with_a_byte_order_mark_keeps_its_first_record(tmp_path):
    """Windows tools (PowerShell, Notepad) start UTF-8 files with a BOM: the first JSON line
    is a record, not an invalid_json dead letter (batch_predict lost it)."""
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(f'{{"x": {i}}}\n' for i in range(3)), encoding="utf-8-sig")
    with BeamTestPipeline(runner=LocalRunner()) as p:
        chunks, dead, _ = p | ReadChunks("test", [str(src)], fmt="jsonl")
        records = chunks | beam.FlatMap(lambda c: [r for _, r in c.records])
        assert_that(records, equal_to(['{"x": 0}', '{"x": 1}', '{"x": 2}']), label="records")
        assert_that(dead, equal_to([]), label="no_dead_letters")
