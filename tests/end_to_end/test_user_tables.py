"""A user's own table with default flags, end to end: hostile headers, string labels, every
input path of --evaluate_label, and late decimals that lose no row. Schema inference's
decisions are tested in tests/preprocessing/test_schema_inference.py."""
import csv
import json
import os

import numpy as np
import pytest

from tests.helpers import (
    built_once,
    late_decimals_csv,
    make_example,
    read_jsonl,
    small_train_config,
)

# ---- end to end: hostile headers, string labels, every input path ------------------------------
# `class`: a Python keyword, which no signature argument may be named (ggplot2's mpg has it);
# `self`: a name TensorFlow's concrete functions take for themselves (Ecdat's Hmda has it).
HEADER = ["", "bill depth (mm)", "2nd length", "île", "class", "self", "Name", "species"]
LABEL = "species"


def _penguin_like(n=600, seed=3):
    """Rows whose class follows the two measurements; a pandas-style index, names."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        depth, length = rng.normal(17, 2), rng.normal(45, 5)
        cls = "Adelie" if depth > 17.5 else ("Gentoo" if length > 45 else "Chinstrap")
        island = ["Biscoe", "Dream", "Torgersen"][i % 3]
        depth_text = "NA" if i % 97 == 0 else f"{depth:.1f}"
        rows.append([str(i), depth_text, f"{length:.1f}", island, ["suv", "van"][i % 2],
                     ["yes", "no"][i % 3 == 0], f'Doe, "Jo" {i}', cls])
    return rows


def _write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(rows)


@pytest.fixture(scope="session")
def hostile(tmp_path_factory):
    """The table preprocessed with an inferred schema and a small model trained on it (once
    for every test process: its tests run on several)."""
    from beam_jobs import preprocess
    from training import train_and_evaluate

    def build(root):
        rows = _penguin_like()
        src = str(root / "table.csv")
        _write_csv(src, rows)
        prep = str(root / "prep")
        summary = preprocess.run(["--input", src, "--output", prep, "--label_column", LABEL])
        metrics = train_and_evaluate(small_train_config(prep, str(root / "job"), epochs=3,
                                                        batch_size=32))
        return root, src, rows, summary, metrics
    return built_once(tmp_path_factory, "hostile", build)


@pytest.mark.slow
def test_hostile_headers_preprocess_and_train(hostile):
    root, _, rows, summary, metrics = hostile
    assert summary["rejected"]["total"] == 0
    assert sum(summary["splits"].values()) == len(rows)
    report = {r["column"]: r for r in summary["inferred_columns"]}
    assert report["column_1"]["role"] == "key"
    assert report["Name"]["role"] == "left_out"
    assert report["bill depth (mm)"]["tf_name"] == "bill_depth_mm"
    assert report["bill depth (mm)"]["type"] == "float"
    assert report["class"]["tf_name"] == "class_" and report["class"]["role"] == "feature"
    assert report["self"]["tf_name"] == "self_" and report["self"]["role"] == "feature"
    raw = json.load(open(os.path.join(root, "prep", "raw_schema.json")))
    assert [c["name"] for c in raw["columns"]] == ["column_1"] + HEADER[1:]
    assert metrics["eval"]["examples"] > 0


def _jsonl(path, rows, numbers=True):
    with open(path, "w") as f:
        for r in rows:
            obj = dict(zip(HEADER[1:], r[1:]))
            if numbers and obj["bill depth (mm)"] != "NA":
                obj["bill depth (mm)"] = float(obj["bill depth (mm)"])
            f.write(json.dumps(obj) + "\n")


def _tfrecords(path, rows):
    import tensorflow as tf
    with tf.io.TFRecordWriter(path) as w:
        for r in rows:
            d = dict(zip(HEADER[1:], r[1:]))
            d["bill depth (mm)"] = float("nan") if d["bill depth (mm)"] == "NA" else \
                float(d["bill depth (mm)"])
            d["2nd length"] = float(d["2nd length"])
            if d["bill depth (mm)"] != d["bill depth (mm)"]:
                del d["bill depth (mm)"]
            w.write(make_example(d))


@pytest.mark.slow
# cp1252 by blocks (the default path, byte ranges read again as UTF-8); its row path is
# tests/beam_jobs/test_preprocess_steps.py's, the same reader.
@pytest.mark.parametrize("path_kind", ["csv_blocks", "csv_rows", "cp1252_blocks", "jsonl",
                                       "tfrecord"])
def test_evaluate_label_with_string_classes_on_every_input_path(hostile, tmp_path, path_kind):
    from beam_jobs import batch_predict
    root, src, rows, _, _ = hostile
    extra = []
    if path_kind.startswith("cp1252"):  # a Windows spreadsheet's export: `île` is one byte
        inp = str(tmp_path / "rows.csv")
        open(inp, "wb").write(open(src, encoding="utf-8").read().encode("cp1252"))
        src = inp
    if path_kind.endswith("blocks"):
        inp = src  # quoted fields with commas and quotes, read as Arrow blocks
    elif path_kind.endswith("rows"):
        inp, extra = src, ["--csv_block_mb", "0"]
    elif path_kind == "jsonl":
        inp = str(tmp_path / "rows.jsonl")
        _jsonl(inp, rows)
    else:
        inp = str(tmp_path / "rows.tfrecord")
        _tfrecords(inp, rows)
    out = str(tmp_path / "out")
    s = batch_predict.run(["--model_dir", os.path.join(root, "job", "export"), "--input", inp,
                           "--output", out, "--evaluate_label", LABEL, *extra])
    assert s["rows_read"] == len(rows) and s["rows_predicted"] == len(rows), s
    preds = read_jsonl(os.path.join(out, "predictions-*.jsonl"))
    labels = sorted(p["label"] for p in preds)
    assert labels == sorted(r[-1] for r in rows)  # strings, as the user wrote them
    assert {p["class"] for p in preds} <= {"Adelie", "Gentoo", "Chinstrap"}
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["examples"] == len(rows)
    expected = np.mean([p["class"] == p["label"] for p in preds])
    assert metrics["accuracy"] == pytest.approx(expected)


@pytest.mark.slow
def test_a_windows_1252_export_preprocesses_as_its_utf8_twin(hostile, tmp_path):
    """The table saved as cp1252 (`île` in its header, `René`/`€` in a column the
    UTF-8 run leaves out as a name), with default flags: read as cp1252, no row rejected,
    the same schema decisions and splits as the UTF-8 file's."""
    from beam_jobs import preprocess
    _, src, rows, summary, _ = hostile
    text = open(src, encoding="utf-8").read().replace("Doe,", "René €,")
    inp = tmp_path / "table.csv"
    inp.write_bytes(text.encode("cp1252"))
    s = preprocess.run(["--input", str(inp), "--output", str(tmp_path / "prep"),
                        "--label_column", LABEL])
    assert s["rejected"]["total"] == 0, s["rejected"]
    assert s["splits"] == summary["splits"]
    decisions = [{k: r[k] for k in ("column", "role", "type", "transform")}
                 for r in s["inferred_columns"]]
    assert decisions == [{k: r[k] for k in ("column", "role", "type", "transform")}
                         for r in summary["inferred_columns"]]
    with pytest.raises(SystemExit):  # a name no codec has: one line, before any pipeline
        preprocess.run(["--input", str(inp), "--output", str(tmp_path / "p2"),
                        "--label_column", LABEL, "--encoding", "utf-16"])


@pytest.mark.slow
def test_hostile_headers_are_served_in_streaming(hostile, tmp_path):
    from beam_jobs import stream_predict
    root, _, rows, _, _ = hostile
    lines = []
    for i, r in enumerate(rows[:25]):
        data = dict(zip(HEADER[1:6], r[1:6]))
        lines.append(json.dumps({"id": f"m{i}", "event_time": 1_700_000_000 + i, "data": data}))
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    stream_predict.run(["--streaming", "--model_dir", os.path.join(root, "job", "export"),
                        "--replay", str(src), "--replay_rate", "100", "--output_dir", str(out),
                        "--window_secs", "5"])
    preds = read_jsonl(str(out / "predictions-*.jsonl"))
    assert sorted(p["id"] for p in preds) == sorted(f"m{i}" for i in range(25))
    assert read_jsonl(str(out / "rejects" / "*.jsonl")) == []


@pytest.mark.slow
def test_late_decimals_lose_no_row_end_to_end(tmp_path):
    from beam_jobs import preprocess
    src = tmp_path / "late.csv"
    src.write_text(late_decimals_csv())
    s = preprocess.run(["--input", str(src), "--output", str(tmp_path / "out"),
                        "--label_column", "y"])
    assert s["rejected"]["total"] == 0, s["rejected"]
    assert sum(s["splits"].values()) == 12_000
    # The default split: 90% train, 10% eval, no test split (nothing chooses on the eval split).
    assert s["splits"]["test"] == 0 and not (tmp_path / "out" / "test").exists()
    assert abs(s["splits"]["train"] / 12_000 - 0.9) < 0.01, s["splits"]
