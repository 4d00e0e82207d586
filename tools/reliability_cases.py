"""The reliability corpus: each bad input tools/reliability.py runs, generated here (nothing to
download), as (name, job arguments, data lines the input holds or None[, job, output]).
"""
from __future__ import annotations

import calendar
import gzip
import io
import os
import re
import subprocess
import sys
import tempfile
import time

from PIL import Image, PngImagePlugin

from preprocessing import TAXI_SPEC as SPEC
from tools.reliability_forms import marked_numbers_cases, unit_word_cases, written_forms_cases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A case's expected outcome where only a refusal is right: a run to the end is a silent loss
# (its rows read with what the file does not hold).
REFUSED = "refused"
ZONES_SPEC = """columns:
  - {name: ts, type: string, transform: datetime, parts: [hour, weekday]}
  - {name: x, type: float, transform: zscore}
  - {name: y, type: int}
label: y
"""


def _taxi_lines(rows: int = 200):
    from tools.datagen import write_csv
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.csv")
        write_csv(path, rows, seed=31, dirty_fraction=0.0)
        return open(path).read().rstrip("\n").split("\n")


def _png(size, text_chunk: int = 0) -> bytes:
    buf = io.BytesIO()
    info = PngImagePlugin.PngInfo()
    if text_chunk:
        info.add_text("comment", "x" * text_chunk, zip=True)
    Image.new("RGB", size, "red").save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


def _writer(work: str):
    """A function writing `text` to a file named `name` in `work`, returning its path."""
    def csv(name, text, mode="w"):
        path = os.path.join(work, name)
        with open(path, mode) as f:
            f.write(text)
        return path
    return csv


def _taxi(path: str) -> list:
    return ["--input", path, "--schema_spec", SPEC]


def cases(work: str, quick: bool):
    """(name, preprocess args, data lines the input holds or None) for each bad input."""
    lines = _taxi_lines()
    header, body = lines[0], lines[1:]
    csv = _writer(work)
    yield from _row_cases(csv, lines)
    yield from _file_cases(work, csv, lines, quick)
    good = os.path.join(work, "a_good.csv")
    yield from _inferred_cases(csv, lines, os.path.join(work, "bomb.csv.gz"),
                               os.path.join(work, "latin1.csv"))
    yield from written_forms_cases(csv, lines)
    yield from marked_numbers_cases(csv, lines)
    yield from unit_word_cases(csv, lines)
    yield from _round3_cases(work, csv, good, header, body)
    yield from _image_cases(work, csv)
    yield from _round4_cases(work, csv, good, header, body)


def _row_cases(csv, lines):
    """Bad rows, line ends and encodings in one file of the taxi table."""
    header, body = lines[0], lines[1:]

    def quote(row):
        b = list(body)
        f = b[row].split(",")
        f[1] = '"' + f[1]
        b[row] = ",".join(f)
        return "\n".join([header] + b) + "\n"

    n = len(body)
    yield "clean", _taxi(csv("clean.csv", "\n".join(lines) + "\n")), n
    yield "stray quote, first row", _taxi(csv("q1.csv", quote(0))), n
    yield "stray quote, middle row", _taxi(csv("q2.csv", quote(n // 2))), n
    yield "CRLF line ends", _taxi(csv("crlf.csv", "\r\n".join(lines) + "\r\n")), n
    yield "UTF-8 BOM", _taxi(csv("bom.csv", "\ufeff" + "\n".join(lines) + "\n")), n
    yield "no final newline", _taxi(csv("nonl.csv", "\n".join(lines))), n
    bad_utf8 = ("\n".join(lines[:20]) + "\n").encode() + b"\xff\xfe,bad\n" + \
        ("\n".join(lines[20:]) + "\n").encode()
    yield "a line that is not UTF-8", _taxi(csv("utf8.csv", bad_utf8, "wb")), n + 1
    nul = list(body)
    nul[3] = nul[3].replace(",", ",\x00\x07", 1)
    yield "control characters in a field", _taxi(csv("ctl.csv", "\n".join([header] + nul))), n
    yield "blank lines", _taxi(csv("blank.csv", "\n\n".join(lines) + "\n")), n
    huge = "\n".join(lines[:50]) + "\n" + "x" * (50 << 20) + "\n" + "\n".join(lines[50:]) + "\n"
    yield "one 50 MB line", _taxi(csv("huge.csv", huge)), n + 1
    odd = list(body)
    for i, v in enumerate(["1_000", "1e-400", "1e39", "nan", "0x10", "\u0661\u0662", "+.5e1"]):
        f = odd[10 + i].split(",")
        f[-1] = v  # fare_amount, the label
        odd[10 + i] = ",".join(f)
    yield "numbers outside the grammar", _taxi(csv("num.csv", "\n".join([header] + odd))), n
    latin1 = csv("latin1.csv", ("\n".join([header] + [r.replace("Cab", "Caf\u00e9") for r in body])
                                + "\n").encode("latin-1"), "wb")
    yield "a Latin-1 file", _taxi(latin1), n
    yield "CR-only line ends (old Mac)", _taxi(csv("cr.csv", "\r".join(lines) + "\r")), None


def _file_cases(work: str, csv, lines, quick: bool):
    """Bad files among the inputs: devices, other encodings, empty, broken gzip, a bomb."""
    header, body = lines[0], lines[1:]
    n = len(body)
    devs = os.path.join(work, "devs")
    os.makedirs(devs, exist_ok=True)
    os.symlink("/dev/zero", os.path.join(devs, "b_zero.csv"))
    os.mkfifo(os.path.join(devs, "c_fifo.csv"))
    with open(os.path.join(devs, "a.csv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    yield "/dev/zero and a FIFO among the inputs", _taxi(os.path.join(devs, "*.csv")), n + 2
    mixed = os.path.join(work, "mixed")
    os.makedirs(mixed, exist_ok=True)
    for name, data in (("a.csv", ("\n".join(lines) + "\n").encode()),
                       ("b_utf16.csv", ("\n".join(lines) + "\n").encode("utf-16")),
                       ("c_cr.csv", ("\r".join(lines) + "\r").encode())):
        with open(os.path.join(mixed, name), "wb") as f:
            f.write(data)
    yield "UTF-16 and CR-only files among the inputs", _taxi(os.path.join(mixed, "*.csv")), n + 2
    yield "header only", _taxi(csv("header.csv", header + "\n")), 0
    yield "empty file", _taxi(csv("empty.csv", "")), 0
    yield "duplicate header name", ["--input", csv("dup.csv", "\n".join(
        [header.replace("fare_amount", "company")] + body)), "--label_column", "key"], None
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    good = csv("a_good.csv", "\n".join(lines) + "\n")
    yield "truncated .gz", _taxi(good + "," + csv("b_cut.csv.gz", data[: len(data) // 2],
                                                 "wb")), None
    yield ".gz that is not gzip", _taxi(good + "," + csv("c_plain.csv.gz", "\n".join(lines),
                                                        "w")), None
    yield ".gz that is not gzip, first file", _taxi(csv("plain.csv.gz", "\n".join(lines))), None
    os.makedirs(os.path.join(work, "dir.csv"), exist_ok=True)
    yield "a folder named .csv", _taxi(os.path.join(work, "dir.csv")), None
    bomb = os.path.join(work, "bomb.csv.gz")
    size_gb = 1 if quick else 4
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write((header + "\n").encode())
        zeros = b"0" * (64 << 20)
        for _ in range(16 * size_gb):
            f.write(zeros)
    yield f"gzip bomb ({size_gb} GB line in {os.path.getsize(bomb) / 1e6:.1f} MB)", _taxi(bomb), 1


def _inferred_cases(csv, lines, bomb, latin1):
    """Bad inputs through the README's default flow, schema inference (`--label_column`),
    which profiles every row at launch before the pipeline reads them (2026-12-05: a
    Latin-1 row, a first row past Arrow's block and a ';' file each failed there)."""
    header, body = lines[0], lines[1:]
    n = len(body)

    def inferred(path, *more):
        return ["--input", path, "--label_column", "fare_amount", *more]

    yield "inferred: a Latin-1 file", inferred(latin1), n
    text = "\n".join(lines) + "\n"
    yield "inferred: a UTF-16 file", inferred(csv("i_utf16.csv", text.encode("utf-16"),
                                                  "wb")), None
    giant = "\n".join([header, "x" * (20 << 20)] + body) + "\n"
    yield "inferred: a first row of 20 MB", inferred(csv("i_giant.csv", giant)), n + 1
    wide = [r.split(",") for r in body]
    wide[5][7] = "w" * 200_000  # payment_type
    yield "inferred: a 200 kB field", inferred(csv("i_wide.csv", "\n".join(
        [header] + [",".join(r) for r in wide]) + "\n"), "--csv_block_mb", "0"), n
    yield "inferred: a ';' file, --delimiter ';'", inferred(
        csv("i_semi.csv", text.replace(",", ";")), "--delimiter", ";"), n
    yield "inferred: a ';' file with decimal commas (39,1)", inferred(
        csv("i_comma.csv", text.replace(",", ";").replace(".", ",")), "--delimiter", ";"), n
    us = re.sub(r"\b(\d{4})-(\d{2})-(\d{2}) (\d\d:\d\d:\d\d) UTC\b",
                lambda m: f"{int(m[2])}/{int(m[3])}/{m[1]} {m[4]}", text)
    yield "inferred: US dates (6/2/2025 08:15:00)", inferred(csv("i_us.csv", us)), n
    spec = open(SPEC).read().replace("transform: datetime,", "transform: datetime, date_order: mdy,")
    bad = us.split("\n")
    for i, date in ((3, "2/30/2025 1:00:00"), (4, "13/1/2025 1:00:00"), (5, "6-2/2025 1:00:00")):
        bad[i] = re.sub(r"^([^,]*),[^,]*,", lambda m: f"{m[1]},{date},", bad[i])
    yield "a spec's month-first dates, 3 impossible", [
        "--input", csv("us_bad.csv", "\n".join(bad)), "--schema_spec",
        csv("us.yaml", spec)], n
    clock = re.sub(r"\b\d{4}-\d{2}-\d{2} (\d\d):(\d\d):\d\d UTC\b", lambda m: (
        f"{(int(m[1]) - 1) % 12 + 1}:{m[2]} {'p.m.' if int(m[1]) >= 12 else 'a.m.'}"), text)
    yield "inferred: pickup times as a clock (8:15 p.m.)", inferred(csv("i_clock.csv", clock)), n
    months = re.sub(r"\b(\d{4})-(\d{2})-\d{2} \d\d:\d\d:\d\d UTC\b",
                    lambda m: f"{calendar.month_abbr[int(m[2])]}-{m[1][2:]}", text)
    yield "inferred: pickup months alone (Jun-25)", inferred(csv("i_months.csv", months)), n
    bad = months.split("\n")
    for i, month in ((3, "2025-13"), (4, "Jnu-25"), (5, "Jun 15")):
        bad[i] = re.sub(r"^([^,]*),[^,]*,", lambda m: f"{m[1]},{month},", bad[i])
    yield "a spec's months alone, 3 impossible", [
        "--input", csv("ym_bad.csv", "\n".join(bad)), "--schema_spec",
        csv("ym.yaml", open(SPEC).read().replace("transform: datetime,",
                                                 "transform: datetime, date_order: ym,"))], n
    def race(m):  # the pickup's seconds since midnight / 20: 0-72 minutes, as a race's
        t = (int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])) // 20
        return f"{t // 60}:{t % 60:02d}" if t < 3600 else f"1:{t // 60 % 60:02d}:{t % 60:02d}"
    durations = re.sub(r"\b\d{4}-\d{2}-\d{2} (\d\d):(\d\d):(\d\d) UTC\b", race, text)
    yield "inferred: pickup times as durations (58:12, 1:02:03)", inferred(
        csv("i_durations.csv", durations)), n
    bad = durations.split("\n")
    for i, time_text in ((3, "5:00 pm"), (4, "58:60"), (5, "1:02.")):
        bad[i] = re.sub(r"^([^,]*),[^,]*,", lambda m: f"{m[1]},{time_text},", bad[i])
    timed = open(SPEC).read().split("crosses:")[0].replace(
        "{name: pickup_datetime, type: string, transform: datetime, parts: [hour, weekday, month]}",
        "{name: pickup_datetime, type: float, clock: duration, transform: zscore}")
    yield "a spec's durations, 3 impossible", [
        "--input", csv("dur_bad.csv", "\n".join(bad)), "--schema_spec",
        csv("dur.yaml", timed)], n
    ended = "\n".join([header] + [r + "," for r in body]) + "\n"
    yield "inferred: a delimiter ending every data row", inferred(csv("i_ended.csv", ended)), n
    yield "inferred: a title line above the header", inferred(csv(
        "i_titled.csv", "Trips exported 2025-01-02\n" + text)), None
    yield "inferred: the gzip bomb", inferred(bomb), None


def _round3_cases(work, csv, good, header, body):
    """Specs, names, zones and many small files (issue 27)."""
    laughs = ["columns: [{name: fare_amount, type: float}]", "label: fare_amount",
              'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    laughs += [f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join(['*' + chr(96 + i)] * 9)}]"
               for i in range(1, 10)]
    yield "a 'billion laughs' YAML spec", ["--input", good, "--schema_spec",
                                          csv("laughs.yaml", "\n".join(laughs) + "\n")], None
    clash = ["ts,ts_hour,y"] + [f"2025-01-0{1 + i % 9} 0{i % 10}:00:00,{i % 7},{i % 5}"
                                for i in range(60)]
    yield "ts_hour beside a datetime ts", ["--input", csv("clash.csv", "\n".join(clash) + "\n"),
                                           "--label_column", "y"], None
    zones = ["ts,x,y"] + [f"2025-03-0{1 + i % 9}T0{i % 10}:15:00{z},{i % 7},{i % 5}"
                          for i, z in enumerate(["+05:30", "Z", " UTC", "-0800", ".250+01:00",
                                                 "", "+05", " PST", "+25:00", "garbage"] * 8)]
    yield "datetimes with zones, some not", ["--input", csv("zones.csv", "\n".join(zones) + "\n"),
                                              "--schema_spec", csv("zones.yaml", ZONES_SPEC)], 80
    yield "a one-column CSV", ["--input", csv("one_col.csv", "y\n" + "1\n2\n" * 50),
                               "--label_column", "y"], None
    small = os.path.join(work, "small")
    os.makedirs(small, exist_ok=True)
    for i, row in enumerate(body * 10):
        with open(os.path.join(small, f"p{i:05d}.csv"), "w") as f:
            f.write(header + "\n" + row + "\n")
    yield f"{len(body) * 10:,} one-row files", ["--input", os.path.join(small, "*.csv"),
                                               "--schema_spec", SPEC], len(body) * 10


def _round4_cases(work, csv, good, header, body):
    """The prediction jobs' promises (issue 39), against a model trained here on `good`."""
    import shutil
    model = os.path.join(work, "r4model")
    for module, args in (("beam_jobs.preprocess", ["--input", good, "--output", model + "_prep",
                                                   "--schema_spec", SPEC]),
                         ("training.task", ["--data_dir", model + "_prep", "--job_dir", model,
                                            "--model", "wide_deep", "--epochs", "1",
                                            "--verbose", "0"])):
        subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, check=True,
                       capture_output=True)
    export = os.path.join(model, "export")
    base = ["--model_dir", export, "--input", good]
    yield "batch: a misspelt flag", base + ["--evaluate_lable", "fare_amount"], None, \
        "batch_predict", None
    yield "batch: a misspelt Dataflow flag", base + ["--num_workrs", "3"], None, \
        "batch_predict", None
    renamed = csv("one_upper.csv", header.replace("passenger_count", "PASSENGER_COUNT") + "\n"
                  + "\n".join(body) + "\n")
    yield "batch: a model column's name upper-cased", ["--model_dir", export, "--input",
                                                       renamed], REFUSED, "batch_predict", None
    yield "batch: a table name ending in a newline", base + [
        "--output_table", "p:ds.t\n", "--temp_location", "gs://b/t"], None, "batch_predict", None
    rejected = csv("all_bad.csv", header + "\n" + "\n".join(
        ",".join(["x"] * len(header.split(","))) for _ in range(30)) + "\n")
    kept = os.path.join(work, "r4kept")
    subprocess.run([sys.executable, "-m", "beam_jobs.batch_predict", *base, "--output", kept],
                   cwd=ROOT, check=True, capture_output=True)
    yield "batch: every row rejected over a good output", [
        "--model_dir", export, "--input", rejected], None, "batch_predict", kept
    locked = os.path.join(work, "r4locked")
    os.makedirs(locked, exist_ok=True)
    lock = os.path.join(locked, "_PUBLISH_LOCK")
    open(lock, "w").close()
    os.utime(lock, (time.time() - 120, time.time() - 120))
    yield "batch: an empty publish lock left by a kill", base, len(body), "batch_predict", locked
    import csv as csv_mod
    lines = [header] + body
    rows = list(csv_mod.reader(lines[:41]))
    rows[40][rows[0].index("fare_amount")] = "1e9"
    buf = io.StringIO()
    csv_mod.writer(buf, lineterminator="\n").writerows(rows)
    outlier = csv("golden_outlier.csv", buf.getvalue())
    yield "batch: a golden label of 1e9", base + ["--golden_set", outlier], None, \
        "batch_predict", None
    narrow = csv("golden_narrow.csv", "key,fare_amount\n" + "".join(
        f"k{i},{i % 30 + 2.5}\n" for i in range(30)))
    yield "batch: a golden set without the features", base + ["--golden_set", narrow], None, \
        "batch_predict", None
    src = os.path.join(work, "r4src.csv")
    bad = [ln.split(",") for ln in lines]
    for row in bad[1:6]:
        row[2] = "n/a"
    with open(src, "w") as f:
        f.write("\n".join(",".join(r) for r in bad) + "\n")
    redriven = os.path.join(work, "r4redrive")
    subprocess.run([sys.executable, "-m", "beam_jobs.batch_predict", "--model_dir", export,
                    "--input", src, "--output", redriven], cwd=ROOT, check=True,
                   capture_output=True)
    swapped = [r[:] for r in bad]
    for r in swapped:
        r[2], r[4] = r[4], r[2]
    with open(src, "w") as f:
        f.write("\n".join(",".join(r) for r in swapped) + "\n")
    shutil.rmtree(model + "_prep", ignore_errors=True)
    yield "redrive: its source regenerated, columns swapped", [], len(body), "redrive", redriven


def _image_cases(work, csv):
    img = os.path.join(work, "img")
    os.makedirs(img, exist_ok=True)
    from tools import shapes
    shapes.generate(img, per_class=3, seed=5)
    good_imgs = sorted(os.path.join(r, f) for r, _, fs in os.walk(img) for f in fs
                       if f.endswith(".jpg"))
    for name, data in (("line.png", _png((30000, 1))),
                       ("text.png", _png((20, 20), PngImagePlugin.MAX_TEXT_CHUNK + 10)),
                       ("empty.jpg", b""), ("cut.jpg", open(good_imgs[0], "rb").read()[:200]),
                       ("bomb.png", shapes.png_claiming(30000, 30000))):
        with open(os.path.join(work, name), "wb") as f:
            f.write(data)
    rows = [f"{p},{os.path.basename(os.path.dirname(p))}" for p in good_imgs]
    rows += [f"{work}/line.png,circle", f"{work}/text.png,circle", f"{work}/empty.jpg,square",
             f"{work}/cut.jpg,square", f"{work}/bomb.png,circle", "/dev/zero,circle", f"{work},circle",
             f"{work}/missing.jpg,cross", "just-one-field"]
    yield ("hostile image list, no header", ["--format", "images", "--input",
                                             csv("labels.csv", "\n".join(rows) + "\n")],
           len(rows))
