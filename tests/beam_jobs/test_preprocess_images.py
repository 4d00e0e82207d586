"""preprocess --format images: class folders and labels CSV, the bad-image corpus with each
reason, exact reconciliation, and the records read back against the images."""
import io
import json
import os
import shutil

import pytest
import tensorflow as tf
from PIL import Image

from beam_jobs import preprocess
from preprocessing.features.transform import LABEL_VOCAB
from tests.helpers import read_examples, read_jsonl
from tools import shapes as shape_gen


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("img")
    shape_gen.generate(str(root / "shapes"), per_class=6, seed=3)
    return root


def _bad_corpus(folder):
    """Writes one bad image per reason into class folders; returns {file name: reason}."""
    good = open(next((folder / "circle").glob("*.jpg")), "rb").read()
    png = io.BytesIO()
    Image.new("RGB", (30, 30), "red").save(png, format="PNG")
    big = io.BytesIO()
    Image.new("L", (2000, 1500)).save(big, format="PNG")
    files = {"empty.jpg": (b"", "empty_file"), "text.jpg": (b"hello" * 50, "not_an_image"),
             "cut.jpg": (good[: len(good) // 2], "truncated"),
             "png-named.jpg": (png.getvalue(), "format_mismatch"),
             "bomb.png": (big.getvalue(), "too_many_pixels")}
    for name, (data, _) in files.items():
        (folder / "square" / name).write_bytes(data)
    return {name: reason for name, (_, reason) in files.items()}


def _read(out):
    import tensorflow_transform as tft
    spec = tft.TFTransformOutput(out).transformed_feature_spec()
    return {s: read_examples(os.path.join(out, s, "*.tfrecord.gz"), spec)
            for s in ("train", "eval", "test") if os.path.isdir(os.path.join(out, s))}


@pytest.mark.slow
def test_class_folders_with_bad_images(shapes, tmp_path):
    folder = tmp_path / "shapes"
    shutil.copytree(shapes / "shapes", folder)
    os.remove(folder / "labels.csv")
    expected = _bad_corpus(folder)
    out = str(tmp_path / "out")
    s = preprocess.run(["--format", "images", "--input", str(folder), "--output", out,
                        "--max_side", "64", "--max_pixels", "1000000"])
    assert s["rows_read"] == 24 + len(expected) and s["reconciled"]
    assert sum(s["splits"].values()) == 24
    rejects = read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
    assert {os.path.basename(r["source"]): r["reason"] for r in rejects} == expected
    import tensorflow_transform as tft
    vocab = [v.decode() for v in tft.TFTransformOutput(out).vocabulary_by_name(LABEL_VOCAB)]
    assert sorted(vocab) == sorted(shape_gen.CLASSES)
    records = _read(out)
    n = 0
    for split in records.values():
        for uri, img, h, w, label in zip(split["uri"], split["image"], split["height"],
                                         split["width"], split["label"]):
            decoded = tf.io.decode_jpeg(img).numpy()
            assert decoded.shape == (h, w, 3) and max(h, w) <= 64
            # The label index names the folder the image came from.
            assert vocab[label] == uri.decode().split("/")[-2]
            n += 1
    assert n == 24


@pytest.mark.slow
def test_labels_csv_relative_uris_and_bad_lines(shapes, tmp_path):
    labels = tmp_path / "labels.csv"
    base = shapes / "shapes"
    lines = ["uri,label"]
    lines += [f"{os.path.relpath(p, tmp_path)},{p.parent.name}" for p in sorted(base.glob("*/*.jpg"))]
    lines += [f"{base}/circle/circle-0000.jpg,hexagon", f"{tmp_path}/missing.jpg,circle",
              "just-one-field"]
    labels.write_text("\n".join(lines) + "\n")
    out = str(tmp_path / "out")
    s = preprocess.run(["--format", "images", "--input", str(labels), "--output", out,
                        "--classes", ",".join(shape_gen.CLASSES)])
    assert s["rows_read"] == 24 + 3 and s["reconciled"]
    assert s["rejected"]["by_reason"] == {"unknown_label": 1, "unreadable_uri": 1,
                                          "wrong_column_count": 1}
    rejects = {r["reason"]: r for r in read_jsonl(os.path.join(out, "rejects", "*.jsonl"))}
    assert rejects["wrong_column_count"]["line"] == 28 and rejects["unknown_label"]["line"] == 26
    raw = json.load(open(os.path.join(out, "raw_schema.json")))
    assert raw["key"] == "uri" and raw["task"] == "classification"


@pytest.mark.slow
def test_a_glob_of_image_files_reads_each_files_class_from_its_folder(shapes, tmp_path):
    """--input 'shapes/*/*.jpg' (a glob of the files, not their root): the rows and classes
    of --input shapes; a glob matching nothing fails in one line naming it."""
    root = shapes / "shapes"
    outs = {}
    for name, given in (("root", str(root)), ("glob", str(root / "*" / "*.jpg"))):
        outs[name] = preprocess.run(["--format", "images", "--input", given, "--output",
                                     str(tmp_path / name), "--max_side", "32"])
    assert outs["glob"]["rows_read"] == outs["root"]["rows_read"] == 24
    assert outs["glob"]["splits"] == outs["root"]["splits"]
    import tensorflow_transform as tft
    vocab = [sorted(tft.TFTransformOutput(str(tmp_path / n)).vocabulary_by_name(LABEL_VOCAB))
             for n in ("root", "glob")]
    assert vocab[0] == vocab[1] and len(vocab[0]) == 4
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--format", "images", "--input", str(root / "*" / "*.png"),
                        "--output", str(tmp_path / "none")])
    assert "no image files match --input" in str(e.value.code)


@pytest.mark.parametrize("make, message", [
    (lambda d: d, "no <class>/<image> files"),
    # Three columns, none named uri/label: neither a header nor `path,label` lines.
    (lambda d: (d / "l.csv").write_text("path,class,x\nx,y,z\n") and d / "l.csv",
     "a labels CSV is `uri,label` lines"),
])
def test_image_inputs_fail_fast(tmp_path, make, message):
    target = make(tmp_path)
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--format", "images", "--input", str(target),
                        "--output", str(tmp_path / "o")])
    assert message in str(e.value.code)
