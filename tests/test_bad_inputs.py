"""Bad inputs the jobs meet on users' real data: each gets a clear error or a dead letter with
its reason, and the counts reconcile."""
import io
import json
import os

import pytest
from PIL import Image

from beam_jobs import preprocess
from preprocessing import TAXI_SPEC
from preprocessing.images import MIN_SIDE, normalize_image, read_image
from preprocessing.rejects import Reject
from tests.conftest import read_jsonl
from tools import shapes as shape_gen
from tools.datagen import write_csv


def _csv(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("bad") / "taxi.csv")
    write_csv(path, 300, seed=21, dirty_fraction=0.0)
    return path


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_column(small_csv, tmp_path):
    bom = _csv(tmp_path, "bom.csv", "\ufeff" + open(small_csv).read())
    s = preprocess.run(["--input", bom, "--output", str(tmp_path / "out"),
                        "--schema_spec", TAXI_SPEC])
    assert s["rows_read"] == 300 and s["rejected"]["total"] == 0 and s["reconciled"]
    assert s["key"] == "key"


def test_duplicate_header_names_fail_fast_naming_the_column(small_csv, tmp_path):
    lines = open(small_csv).read().split("\n")
    lines[0] = lines[0].replace("fare_amount", "company")  # two columns named company
    dup = _csv(tmp_path, "dup.csv", "\n".join(lines))
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", dup, "--output", str(tmp_path / "out"),
                        "--label_column", "passenger_count"])
    assert "column 'company' appears twice in the header" in str(e.value.code)
    assert not os.path.exists(tmp_path / "out" / "summary.json")


def test_a_header_only_file_fails_instead_of_publishing_empty_splits(small_csv, tmp_path):
    header = _csv(tmp_path, "header.csv", open(small_csv).readline())
    out = tmp_path / "out"
    with pytest.raises(Exception, match="no rows reached train"):
        preprocess.run(["--input", header, "--output", str(out), "--schema_spec", TAXI_SPEC])
    assert not (out / "_SUCCESS").exists() and not (out / "train").exists()


def test_the_trainer_names_an_empty_split(tmp_path):
    from training.data import EmptySplitError, check_splits
    (tmp_path / "summary.json").write_text(json.dumps(
        {"splits": {"train": 12, "eval": 0, "test": 1}}))
    with pytest.raises(EmptySplitError, match="the eval split of .* is empty"):
        check_splits(str(tmp_path))
    (tmp_path / "summary.json").write_text(json.dumps(
        {"splits": {"train": 12, "eval": 3, "test": 0}}))
    check_splits(str(tmp_path))  # an empty test split is allowed


def _png(size):
    buf = io.BytesIO()
    Image.new("RGB", size, "red").save(buf, format="PNG")
    return buf.getvalue()


def test_image_files_are_read_only_when_regular_and_within_the_bound(tmp_path):
    with pytest.raises(Reject) as e:
        read_image("/dev/zero", 1000)  # never read: a device
    assert e.value.reason == "not_a_file"
    with pytest.raises(Reject) as e:
        read_image(str(tmp_path), 1000)
    assert e.value.reason == "not_a_file"
    big = tmp_path / "big.png"
    big.write_bytes(_png((300, 300)))
    with pytest.raises(Reject) as e:
        read_image(str(big), 100)
    assert e.value.reason == "image_too_large"
    assert read_image(str(big), 10_000) == big.read_bytes()
    with pytest.raises(Reject) as e:
        read_image(str(tmp_path / "missing.png"), 1000)
    assert e.value.reason == "unreadable_uri"


@pytest.mark.parametrize("size", [(30000, 1), (MIN_SIDE - 1, 64), (64, 2048 + 64)])
def test_degenerate_images_are_rejected(size):
    with pytest.raises(Reject) as e:
        normalize_image(_png(size), "x.png", max_pixels=10**9)
    assert e.value.reason == "degenerate_image"
    assert normalize_image(_png((MIN_SIDE, MIN_SIDE * 32)), "ok.png").width > 0


@pytest.mark.slow
def test_labels_csv_without_a_header_and_hostile_uris(tmp_path):
    shape_gen.generate(str(tmp_path / "img"), per_class=3, seed=4)
    good = sorted((tmp_path / "img").glob("*/*.jpg"))
    (tmp_path / "line.png").write_bytes(_png((3000, 1)))
    lines = [f"{p},{p.parent.name}" for p in good]  # tensorflow/tpu's format: no header
    lines += ["/dev/zero,circle", f"{tmp_path},circle", f"{tmp_path / 'line.png'},square"]
    labels = _csv(tmp_path, "labels.csv", "\n".join(lines) + "\n")
    out = tmp_path / "out"
    s = preprocess.run(["--format", "images", "--input", labels, "--output", str(out),
                        "--max_image_bytes", str(1 << 20)])
    assert s["rows_read"] == len(lines) and s["reconciled"]
    assert sum(s["splits"].values()) == len(good)
    assert s["rejected"]["by_reason"] == {"not_a_file": 2, "degenerate_image": 1}
    rejects = read_jsonl(str(out / "rejects" / "*.jsonl"))
    assert {r["line"] for r in rejects} == {len(good) + 1, len(good) + 2, len(good) + 3}
