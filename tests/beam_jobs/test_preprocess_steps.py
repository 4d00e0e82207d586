"""beam_jobs/preprocess_steps.py: the preprocess job's reading composites (ReadCsvSplits,
ReadImageSplits) under Beam's TestPipeline + assert_that, on the files users' inputs come
as: every record lands in a split or in a dead letter with its reason, and the tallies
reconcile; and ParseAndSplit alone on chunks. No tf.transform runs here:
tests/beam_jobs/test_preprocess.py runs the whole job."""
import collections
import gzip
import json
import os
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import preprocess
from beam_jobs import preprocess_steps as pp
from beam_jobs.preprocess_inputs import InputsFound
from beam_jobs.shared.local_runner import LocalRunner
from preprocessing import TAXI_SPEC
from preprocessing.accounting import counting
from preprocessing.accounting.counting import Tallies
from preprocessing.accounting.rejects import FILE_REASONS
from preprocessing.contract.schema import ColumnSpec, Schema
from preprocessing.contract.split import SPLITS
from preprocessing.files.reading import Chunk
from preprocessing.images.checks import ImageLimits
from tests.helpers import ROOT
from tools import shapes as shape_gen
from tools.datagen import write_csv
from tools.reliability import PEAK_RSS_MB

FRACTIONS = (0.8, 0.1, 0.1)
SCHEMA = Schema(columns=(ColumnSpec("id", "string"), ColumnSpec("x", "float", "zscore"),
                         ColumnSpec("y", "float")),
                label="y", key="id", task="regression")


HEADER = ("id", "x", "y")


RECORDS = [(2, "a,1.5,3"), (3, "b,oops,4"), (4, "c,2.5,5"), (5, "d,,6")]


@pytest.fixture(scope="module")
def taxi_schema():
    return Schema.load(TAXI_SPEC)


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("clean") / "taxi.csv")
    write_csv(path, 300, seed=21, dirty_fraction=0.0)
    return path


def _read_csv(p, schema, patterns, label="ReadCsv", **kw) -> pp.RawSplits:
    return p | label >> pp.ReadCsvSplits(schema, [str(x) for x in patterns], FRACTIONS, **kw)


def _totals(raw: pp.RawSplits, label="Totals"):
    """One {name: n} dict: the reader's tallies (rows_read, files_read), rows_<split> and
    rejected_<reason>, as the job's Finalize sums them."""
    rows = [raw.split(s) | f"{label}Rows_{s}" >> beam.Map(lambda rb, s=s: (f"rows_{s}",
                                                                             rb.num_rows))
            for s in SPLITS]
    counts = tuple([raw.counts] + rows) | f"{label}Counts" >> beam.Flatten()
    return (counts, raw.rejects) | label >> Tallies()


def _check_totals(expected_rejected: dict, rows_read=None, rows_kept=None):
    """A matcher: rejects by reason as expected, and rows read == rows in splits + rejects."""
    def match(actual):
        (t,) = actual
        rejected = {k[len("rejected_"):]: n for k, n in t.items() if k.startswith("rejected_")}
        kept = sum(t.get(f"rows_{s}", 0) for s in SPLITS)
        assert rejected == expected_rejected, rejected
        assert t["rows_read"] == kept + sum(rejected.values()), t
        if rows_read is not None:
            assert t["rows_read"] == rows_read, t
        if rows_kept is not None:
            assert rows_kept(kept), (kept, t)
    return match


def _file_level(rejects):
    """(file name, reason, detail) of the dead letters that stand for a whole file."""
    return rejects | "FileLevel" >> beam.FlatMap(
        lambda r: [(os.path.basename(r.source), r.reason, r.detail)]
        if r.reason in FILE_REASONS else [])


def _pipeline():
    return BeamTestPipeline(runner=LocalRunner())


def test_a_bad_file_inside_a_glob_is_dead_lettered_row_by_row(small_csv, taxi_schema,
                                                              tmp_path):
    (tmp_path / "a.csv").write_text(open(small_csv).read())
    (tmp_path / "b.csv").write_bytes(b"key,fare_amount\nx,1.0\n\xff\xfe,2\n")
    with _pipeline() as p:
        raw = _read_csv(p, taxi_schema, [tmp_path / "*.csv"])
        assert_that(_totals(raw), _check_totals(
            {"missing_column": 1, "bad_encoding": 1}, rows_read=302,
            rows_kept=lambda n: n == 300))


@pytest.mark.parametrize("case", ["truncated", "not_gzip"])
def test_a_cut_or_corrupt_gz_is_one_file_level_dead_letter_after_the_rows_read(
        small_csv, taxi_schema, tmp_path, case):
    """The rows before the cut are kept; the file is one truncated_file / corrupt_file dead
    letter (Finalize then publishes the run as partial: tests/beam_jobs/test_finalize.py)."""
    text = open(small_csv).read()
    data = gzip.compress(text.encode())
    (tmp_path / "a.csv").write_text(text)
    (tmp_path / "b.csv.gz").write_bytes(data[: len(data) // 2] if case == "truncated"
                                        else text.encode())
    reason = "truncated_file" if case == "truncated" else "corrupt_file"
    with _pipeline() as p:
        raw = _read_csv(p, taxi_schema, [tmp_path / "a.csv", tmp_path / "b.csv.gz"])
        assert_that(_totals(raw), _check_totals(
            {reason: 1}, rows_kept=(lambda n: 300 < n < 600) if case == "truncated"
            else (lambda n: n == 300)))
        assert_that(_file_level(raw.rejects),
                    lambda got: _equal([g[:2] for g in got], [("b.csv.gz", reason)]),
                    label="the_file")


def test_devices_fifos_and_unreadable_inputs_are_file_level_dead_letters(small_csv,
                                                                         taxi_schema, tmp_path):
    """/dev/zero never ends and a FIFO blocks: only regular files are read; each other
    input is one unreadable_file dead letter."""
    os.symlink("/dev/zero", tmp_path / "zero.csv")
    os.mkfifo(tmp_path / "fifo.csv")
    (tmp_path / "good.csv").write_text(open(small_csv).read())
    with _pipeline() as p:
        raw = _read_csv(p, taxi_schema, [tmp_path / "*.csv"])
        assert_that(_totals(raw), _check_totals({"unreadable_file": 2}, rows_read=302))
        assert_that(_file_level(raw.rejects),
                    lambda got: _equal([g[:2] for g in got], [("zero.csv", "unreadable_file"),
                                                              ("fifo.csv", "unreadable_file")]),
                    label="files")


def test_encodings_line_ends_control_characters_and_numbers(small_csv, taxi_schema, tmp_path):
    """A folder of the same 300 rows written the ways users' files come: every physical line
    is in a split or a dead letter with its reason; a file whose header cannot be read
    (UTF-16, CR-only line ends) is one bad_header dead letter, not a crash."""
    text = open(small_csv).read()
    header, *body = text.rstrip("\n").split("\n")

    def put(name, data):
        (tmp_path / name).write_bytes(data if isinstance(data, bytes) else data.encode())

    put("a_lf.csv", text)
    put("b_crlf.csv", text.replace("\n", "\r\n"))
    put("c_latin1.csv", text.replace("Cab", "Caf\u00e9").encode("latin-1"))
    ctl = list(body)
    ctl[3] = ctl[3].replace(",", ",\x00\x07", 1)  # into the datetime field
    put("d_control.csv", "\n".join([header] + ctl) + "\n")
    put("e_blank_lines.csv", "\n\n".join([header] + body) + "\n\n")
    put("f_no_final_newline.csv", text.rstrip("\n"))
    odd = list(body)
    for i, v in enumerate(["1_000", "1e-400", "1e39", "nan", "0x10", "\u0661\u0662", "+.5e1"]):
        f = odd[10 + i].split(",")
        f[-1] = v  # fare_amount, the label
        odd[10 + i] = ",".join(f)
    put("g_numbers.csv", "\n".join([header] + odd) + "\n")
    put("h_utf16.csv", text.encode("utf-16"))
    put("i_cr_only.csv", text.replace("\n", "\r"))
    put("j_empty.csv", "")
    latin1 = sum("Cab" in r for r in body)
    assert latin1 > 0

    def headers(got):
        details = {name: detail for name, reason, detail in got if reason == "bad_header"}
        assert sorted(details) == ["h_utf16.csv", "i_cr_only.csv"], got
        assert "CR-only line ends" in details["i_cr_only.csv"]
        assert "bad_encoding" in details["h_utf16.csv"]

    with _pipeline() as p:
        raw = _read_csv(p, taxi_schema, [tmp_path / "*.csv"])
        assert_that(_totals(raw), _check_totals(
            {"bad_encoding": latin1, "unparsable_datetime": 1, "non_finite_number": 1,
             "number_out_of_range": 2, "unparsable_number": 3, "bad_header": 2},
            rows_read=7 * len(body) + 2))
        assert_that(_file_level(raw.rejects), headers, label="headers")


def _equal(got, expected):
    assert collections.Counter(got) == collections.Counter(expected), got


def _row_json(row: dict) -> str:
    """A raw row (tf.transform's format: a list per value, text as bytes) as JSON."""
    return json.dumps({k: None if v is None else [
        x.decode("utf-8", "backslashreplace") if isinstance(x, bytes) else x for x in v]
        for k, v in row.items()}, sort_keys=True)


def _rows_and_rejects(raw: pp.RawSplits, label: str):
    """Every row as (split, its values as JSON) and every dead letter without its time."""
    rows = [raw.split(s) | f"{label}_{s}" >> beam.FlatMap(
        lambda rb, s=s: [(s, _row_json(r)) for r in rb.to_pylist()]) for s in SPLITS]
    dead = raw.rejects | f"{label}_rejects" >> beam.Map(
        lambda r: ("rejects", json.dumps({k: v for k, v in r.to_dict().items()
                                          if k != "time"}, sort_keys=True)))
    return tuple(rows + [dead]) | f"{label}_all" >> beam.Flatten()


def test_blocks_and_rows_give_the_same_splits_values_and_dead_letters(taxi_csv, taxi_schema,
                                                                      tmp_path):
    """Arrow blocks (the default) against record by record, on dirty rows plus the cases that
    send a block or a row back to the row path: a quoted field spanning lines, bad UTF-8,
    padded and exotic numbers, CRLF line ends, a delimiter ending a row. Rows, keys, splits,
    every dead letter (line, raw, reason, detail) and every raw value are the same."""
    header, *body = open(taxi_csv[0], "rb").read().rstrip(b"\n").split(b"\n")
    odd = [b'trip-x1,2025-01-01 10:00:00 UTC,-73.9,40.7,-73.8,40.8,2,"Cash\nor card",A,5.0',
           b"trip-x2,2025-01-01 10:00:00 UTC,-73.9,40.7,-73.8,40.8,2,Cash,Caf\xe9,5.0",
           b"trip-x3,2025-01-01 10:00:00 UTC, -73.9 ,40.7,-73.8,40.8, 3 ,Cash,A,5e0",
           b"trip-x4,2025-01-01 10:00:00 UTC,-73.9,40.7,-73.8,40.8,1,Cash,A,1e-400",
           b"trip-x5,2025-01-01 10:00:00 UTC,-73.9,40.7,-73.8,40.8,,Cash,A,7.5\r",
           b"trip-x6,2025-01-01 10:00:00 UTC,0x10,40.7,-73.8,40.8,1,Cash,A,7.5",
           b"trip-x7,2025-01-01 10:00:00 UTC,-73.9,40.7,-73.8,40.8,1,Cash,A,7.5,",
           b"trip-x8,2025-01-01 10:00:00 UTC,-73.9,40.7,-73.8,40.8,1,Cash,A,7.5,9"]
    for i, line in enumerate(odd):
        body.insert(400 * i + 17, line)
    src = tmp_path / "mixed.csv"
    src.write_bytes(b"\n".join([header] + body) + b"\n")

    def same(got):
        by_mode = dict(got)
        rows, blocks = by_mode["rows"], by_mode["blocks"]
        assert collections.Counter(rows) == collections.Counter(blocks)
        kept = [json.loads(v)["key"][0] for s, v in blocks if s != "rejects"]
        assert len(kept) + sum(s == "rejects" for s, _ in blocks) == len(body)
        assert {"trip-x1", "trip-x3", "trip-x5", "trip-x7"} <= set(kept)
        reasons = {json.loads(v)["raw"][:7]: json.loads(v)["reason"] for s, v in blocks
                   if s == "rejects" and json.loads(v)["raw"].startswith("trip-x")}
        assert reasons == {"trip-x2": "bad_encoding", "trip-x4": "number_out_of_range",
                           "trip-x6": "unparsable_number", "trip-x8": "wrong_column_count"}

    with _pipeline() as p:
        # 0.01 MB: ~40 blocks, some parsed column-wise, some sent back to the row path
        outs = {mode: _rows_and_rejects(_read_csv(p, taxi_schema, [src], label=f"Read_{mode}",
                                                  block_bytes=block), mode)
                for mode, block in (("rows", None), ("blocks", 10_485))}
        both = (outs["rows"] | "AllRows" >> beam.combiners.ToList()
                | "KeyRows" >> beam.Map(lambda v: ("rows", v)),
                outs["blocks"] | "AllBlocks" >> beam.combiners.ToList()
                | "KeyBlocks" >> beam.Map(lambda v: ("blocks", v)))
        assert_that(both | beam.Flatten(), same)


_CHILD = """
import json, sys
import apache_beam as beam
from beam_jobs import preprocess_steps as pp
from beam_jobs.shared.local_runner import LocalRunner
from preprocessing import TAXI_SPEC
from preprocessing.accounting.counting import Tallies
from preprocessing.contract.schema import Schema
with beam.Pipeline(runner=LocalRunner()) as p:
    raw = p | pp.ReadCsvSplits(Schema.load(TAXI_SPEC), [sys.argv[1]], (0.8, 0.1, 0.1))
    rows = [raw.split(s) | f"N{s}" >> beam.Map(lambda rb: ("rows", rb.num_rows))
            for s in ("train", "eval", "test")]
    _ = ((tuple([raw.counts] + rows) | beam.Flatten(), raw.rejects) | Tallies()
         | beam.Map(lambda t: print("TOTALS", json.dumps(t), flush=True)))
"""


def _read_in_a_child(path: str):
    """Reads `path` through ReadCsvSplits in a fresh process: (its totals, its peak RSS MB)."""
    code = _CHILD + f"print({PEAK_RSS_MB})\n"
    r = subprocess.run([sys.executable, "-c", code, path], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    (totals,) = [json.loads(x[len("TOTALS "):]) for x in lines if x.startswith("TOTALS ")]
    return totals, int(lines[-1])


@pytest.mark.slow
def test_one_huge_line_or_a_gzip_bomb_is_rejected_with_bounded_memory(small_csv, tmp_path):
    """A 200 MB line, and 1 GB of one line gzipped to 1 MB: each is one record_too_large dead
    letter while the reader's memory stays near what it takes for a small clean file."""
    lines = open(small_csv).read().split("\n")
    huge = tmp_path / "huge.csv"
    with open(huge, "w") as f:
        f.write("\n".join(lines[:50]) + "\n")
        f.write("x" * (200 << 20) + "\n")
        f.write("\n".join(lines[50:]))
    bomb = tmp_path / "bomb.csv.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(open(small_csv, "rb").readline())
        zeros = b"0" * (64 << 20)
        for _ in range(16):  # 1 GB of '0' without a line end
            f.write(zeros)
    base_totals, base = _read_in_a_child(small_csv)
    assert base_totals["rows_read"] == base_totals["rows"] == 300
    for path, kept in ((huge, 300), (bomb, 0)):
        totals, peak = _read_in_a_child(str(path))
        assert totals["rejected_record_too_large"] == 1 and totals.get("rows", 0) == kept
        assert totals["rows_read"] == kept + 1
        # Read whole, either line takes over 1 GB (the bomb's grows past its 1 GB); streamed,
        # memory stays near the clean file's.
        assert peak - base < 600, (path.name, base, peak)


def test_a_labels_csv_without_a_header_and_hostile_uris(tmp_path):
    """tensorflow/tpu's labels format (no header) is recognised at launch; a device, a
    folder and a 3000x1 image in it are dead letters with their line and reason."""
    shape_gen.generate(str(tmp_path / "img"), per_class=3, seed=4)
    good = sorted((tmp_path / "img").glob("*/*.jpg"))
    from PIL import Image
    Image.new("RGB", (3000, 1)).save(tmp_path / "line.png")
    lines = [f"{p},{p.parent.name}" for p in good]
    lines += ["/dev/zero,circle", f"{tmp_path},circle", f"{tmp_path / 'line.png'},square"]
    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join(lines) + "\n")
    args = preprocess.parse_args(PipelineOptions([
        "--format", "images", "--input", str(labels), "--output", str(tmp_path / "out"),
        "--max_image_bytes", str(1 << 20)]))
    found = InputsFound(args)
    assert found.labels_header == ("uri", "label")
    n = len(good)
    with _pipeline() as p:
        raw = p | pp.ReadImageSplits(found.schema, FRACTIONS, ImageLimits.of(args),
                                     list_files=found.patterns, header=found.labels_header)
        assert_that(_totals(raw), _check_totals(
            {"not_a_file": 2, "degenerate_image": 1}, rows_read=len(lines),
            rows_kept=lambda k: k == n))
        assert_that(raw.rejects | beam.Map(lambda r: (r.line, r.reason)),
                    lambda got: _equal(got, [(n + 1, "not_a_file"), (n + 2, "not_a_file"),
                                             (n + 3, "degenerate_image")]), label="lines")


def test_parse_and_split_gives_every_row_one_split_or_one_dead_letter():
    with _pipeline() as p:
        out = (p | beam.Create([Chunk("in.csv", "csv", HEADER, RECORDS)])
               | beam.ParDo(pp.ParseAndSplit(SCHEMA, (1.0, 0.0, 0.0))).with_outputs(
                   "rejects", counting.COUNTS, "train", "eval", "test"))
        # tf.transform's raw RecordBatch: one list per value, strings as bytes
        ids = out.train | beam.FlatMap(lambda rb: [v[0].decode() for v in
                                                   rb.column("id").to_pylist()])
        xs = out.train | beam.FlatMap(lambda rb: [v[0] for v in rb.column("x").to_pylist()])
        reasons = out.rejects | beam.Map(lambda r: (r.line, r.reason))
        assert_that(ids, equal_to(["a", "c"]), label="train_ids")
        assert_that(xs, equal_to([1.5, 2.5]), label="train_values")
        assert_that(reasons, equal_to([(3, "unparsable_number"), (5, "missing_value")]),
                    label="dead_letters")
        assert_that(out.eval, equal_to([]), label="no_eval")


def test_many_small_chunks_become_few_batches_with_every_row():
    """One-row files: their rows are gathered into batches (tf.transform pays per batch),
    none lost or doubled, the bad ones dead-lettered."""
    from preprocessing.files.csv_blocks import CsvBlock
    chunks = [Chunk(f"f{i}.csv", "csv", HEADER,
                    CsvBlock(2, f"r{i},{'oops' if i % 50 == 0 else i},{i}\n".encode()))
              for i in range(600)]
    with _pipeline() as p:
        out = (p | beam.Create(chunks, reshuffle=False)
               | beam.ParDo(pp.ParseAndSplit(SCHEMA, (0.5, 0.5, 0.0))).with_outputs(
                   "rejects", counting.COUNTS, "train", "eval", "test"))
        batches = (out.train, out.eval) | beam.Flatten()
        ids = batches | beam.FlatMap(lambda rb: [v[0].decode() for v in
                                                 rb.column("id").to_pylist()])
        sizes = batches | beam.Map(lambda rb: rb.num_rows)
        assert_that(ids, equal_to([f"r{i}" for i in range(600) if i % 50]), label="ids")
        assert_that(sizes | "NBatches" >> beam.combiners.Count.Globally(),
                    lambda n: _check(n[0] <= 8, f"{n[0]} batches"), label="few_batches")
        assert_that(out.rejects | "NRejects" >> beam.combiners.Count.Globally(), equal_to([12]),
                    label="rejects")


def test_a_number_key_is_split_by_its_text_in_rows_and_blocks_alike():
    """An int key column (declared in a spec) is hashed as its text, whether the rows come
    record by record or in CSV blocks (the column-wise parser)."""
    from preprocessing.contract.split import boundaries, split_index
    from preprocessing.files.csv_blocks import CsvBlock
    schema = Schema(columns=(ColumnSpec("id", "int"), ColumnSpec("x", "float", "zscore"),
                             ColumnSpec("y", "float")), label="y", key="id", task="regression")
    lines = [f"{i},{i % 7}.5,{i % 3}" for i in range(400)]
    rows = Chunk("in.csv", "csv", HEADER, [(i + 2, line) for i, line in enumerate(lines)])
    block = Chunk("in.csv", "csv", HEADER, CsvBlock(2, ("\n".join(lines) + "\n").encode()))
    fractions = (0.5, 0.5, 0.0)
    expected = {n: sorted(i for i in range(400)
                          if split_index(str(i), boundaries(fractions)) == s)
                for s, n in enumerate(("train", "eval"))}
    assert len(expected["eval"]) > 100
    for name, chunk in (("rows", rows), ("blocks", block)):
        with _pipeline() as p:
            out = (p | name >> beam.Create([chunk])
                   | beam.ParDo(pp.ParseAndSplit(schema, fractions)).with_outputs(
                       "rejects", counting.COUNTS, "train", "eval", "test"))
            for split in ("train", "eval"):
                ids = out[split] | f"{split}Ids" >> beam.FlatMap(
                    lambda rb: [v[0] for v in rb.column("id").to_pylist()])
                assert_that(ids, equal_to(expected[split]), label=f"{name}_{split}")


def _check(ok, what):
    assert ok, what


def test_the_splits_carry_record_batches_under_their_arrow_coder(taxi_schema, small_csv):
    """The raw splits are typed, so Beam codes them with RecordBatchCoder, not pickle."""
    import pyarrow as pa

    from preprocessing.parsing.record_batches import RecordBatchCoder
    p = beam.Pipeline()
    raw = _read_csv(p, taxi_schema, [small_csv])
    for s in SPLITS:
        pcoll = raw.split(s)
        assert pcoll.element_type == pa.RecordBatch
        assert isinstance(beam.coders.registry.get_coder(pcoll.element_type), RecordBatchCoder)


def test_a_cp1252_file_reads_as_its_utf8_twin_by_blocks_and_by_records(taxi_csv, taxi_schema,
                                                                       tmp_path):
    """--encoding cp1252 (what `auto` picks for a spreadsheet export): the same rows, splits
    and dead letters as the same text saved as UTF-8, record by record and as Arrow blocks,
    with no row lost to an accented value, a euro sign or a byte cp1252 leaves undefined."""
    header, *body = open(taxi_csv[0], encoding="utf-8").read().rstrip("\n").split("\n")
    names = ["Caf\u00e9 Ren\u00e9", "\u20ac Cab", "\u00cele \x81 taxi"]
    body = [line.replace(",Cash,", f",{names[i % 3]},", 1) if i % 7 == 0 else line
            for i, line in enumerate(body)]
    text = "\n".join([header] + body) + "\n"
    (tmp_path / "utf8").mkdir()
    (tmp_path / "cp1252").mkdir()
    (tmp_path / "utf8" / "t.csv").write_bytes(text.encode("utf-8"))
    # 0x81 has no cp1252 character to be written from: put in as the byte itself
    (tmp_path / "cp1252" / "t.csv").write_bytes(
        text.replace("\x81", "\x01").encode("cp1252").replace(b"\x01", b"\x81"))
    assert b"\xe9" in (tmp_path / "cp1252" / "t.csv").read_bytes()

    def same(got):
        by_mode = collections.defaultdict(list)
        for mode, (split, value) in got:  # dead letters name their file: the twins' folder
            by_mode[mode].append((split, value.replace("/cp1252/", "/utf8/")))
        twin = collections.Counter(by_mode["utf8"])
        assert by_mode.keys() == {"utf8", "cp1252_rows", "cp1252_blocks"}
        for mode in ("cp1252_rows", "cp1252_blocks"):
            assert collections.Counter(by_mode[mode]) == twin, mode
        values = " ".join(v for s, v in by_mode["cp1252_blocks"] if s != "rejects")
        assert all(json.dumps(n)[1:-1] in values for n in names), names

    with _pipeline() as p:
        runs = {"utf8": ("utf8", "utf-8", 10_485), "cp1252_rows": ("cp1252", "cp1252", None),
                "cp1252_blocks": ("cp1252", "cp1252", 10_485)}
        outs = [_rows_and_rejects(_read_csv(p, taxi_schema, [tmp_path / d / "t.csv"],
                                            label=f"Read_{mode}", block_bytes=block,
                                            encoding=enc), mode)
                | f"Mode_{mode}" >> beam.Map(lambda sv, mode=mode: (mode, sv))
                for mode, (d, enc, block) in runs.items()]
        assert_that(outs | beam.Flatten(), same)
