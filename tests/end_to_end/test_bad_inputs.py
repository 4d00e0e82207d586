"""Bad inputs the jobs meet on users' real data: each gets a clear error or a dead letter with
its reason, and the counts reconcile."""
import io
import json
import os

import pytest
from PIL import Image

from beam_jobs import preprocess
from preprocessing import TAXI_SPEC
from preprocessing.accounting.rejects import Reject
from preprocessing.files import filesys
from preprocessing.images.checks import MIN_SIDE, ImageLimits, normalize_image, read_image
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


def test_duplicate_header_names_fail_fast_naming_the_column(small_csv, tmp_path):
    lines = open(small_csv).read().split("\n")
    lines[0] = lines[0].replace("fare_amount", "company")  # two columns named company
    dup = _csv(tmp_path, "dup.csv", "\n".join(lines))
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", dup, "--output", str(tmp_path / "out"),
                        "--label_column", "passenger_count"])
    assert "column 'company' appears twice in the header" in str(e.value.code)
    assert not os.path.exists(tmp_path / "out" / "summary.json")


@pytest.mark.parametrize("spec", [False, True])
def test_a_title_above_the_header_fails_fast_naming_the_header_line(small_csv, tmp_path, spec):
    titled = _csv(tmp_path, "titled.csv", "Trips exported 2025-01-02\n\n" + open(small_csv).read())
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", titled, "--output", str(tmp_path / "out")] +
                       (["--schema_spec", TAXI_SPEC] if spec else
                        ["--label_column", "fare_amount"]))
    assert "'fare_amount' is not in the header" in str(e.value.code)
    assert "line 3 holds it" in str(e.value.code)
    assert "remove the 2 line(s) above the header" in str(e.value.code)


def test_the_trainer_names_an_empty_split(tmp_path):
    from training.data import EmptySplitError, check_eval_split, check_splits
    (tmp_path / "summary.json").write_text(json.dumps(
        {"splits": {"train": 0, "eval": 3, "test": 1}}))
    with pytest.raises(EmptySplitError, match="the train split of .* is empty"):
        check_splits(str(tmp_path))
    (tmp_path / "summary.json").write_text(json.dumps(
        {"splits": {"train": 12, "eval": 0, "test": 0}}))
    check_splits(str(tmp_path))  # empty eval and test splits are the trainer's call
    # An empty eval split: only a run that measures on folds of the train split goes on.
    rows = {"train": 12, "eval": 0, "test": 0}
    with pytest.raises(EmptySplitError, match="the eval split of .* is empty.*--model auto"):
        check_eval_split(str(tmp_path), rows, cross_fitted=False)
    assert check_eval_split(str(tmp_path), rows, cross_fitted=True) is True
    assert check_eval_split(str(tmp_path), dict(rows, eval=3), cross_fitted=False) is False


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
        normalize_image(_png(size), "x.png", ImageLimits(max_pixels=10**9))
    assert e.value.reason == "degenerate_image"
    assert normalize_image(_png((MIN_SIDE, MIN_SIDE * 32)), "ok.png").width > 0


def test_a_first_file_with_cr_only_line_ends_fails_at_launch_saying_so(small_csv, tmp_path):
    (tmp_path / "mac.csv").write_text(open(small_csv).read().replace("\n", "\r"))
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", str(tmp_path / "mac.csv"), "--output", str(tmp_path / "o"),
                        "--schema_spec", TAXI_SPEC])
    assert "CR-only line ends" in str(e.value.code) and "\n" not in str(e.value.code)


def test_only_readable_regular_files_are_opened(tmp_path):
    os.mkfifo(tmp_path / "fifo.csv")
    for path in ("/dev/zero", str(tmp_path / "fifo.csv"), str(tmp_path), "/no/such.csv"):
        with pytest.raises(filesys.UnreadableInput):
            filesys.open_input(path)
    if os.geteuid() != 0:  # root reads any file: the permission case needs another user
        locked = tmp_path / "locked.csv"
        locked.write_text("a,b\n")
        locked.chmod(0)
        with pytest.raises(filesys.UnreadableInput, match="Permission denied"):
            filesys.open_input(str(locked))


def test_a_first_file_that_is_not_gzip_fails_at_launch_in_one_line(small_csv, tmp_path):
    bad = tmp_path / "in.csv.gz"
    bad.write_text(open(small_csv).read())
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", str(bad), "--output", str(tmp_path / "o"),
                        "--schema_spec", TAXI_SPEC])
    assert "Not a gzipped file" in str(e.value.code) and "\n" not in str(e.value.code)


def test_an_incomplete_newer_model_version_is_skipped(tmp_path, caplog):
    from inference.model.versions import RAW_SCHEMA_ASSET, list_versions, resolve_model_dir
    for version, files in ((100, ["saved_model.pb", "variables/variables.index",
                                  RAW_SCHEMA_ASSET]),
                           (200, ["saved_model.pb"]),                       # no variables
                           (300, ["saved_model.pb", "variables/variables.index"])):  # cut
        for name in files:
            path = tmp_path / str(version) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
    assert resolve_model_dir(str(tmp_path)) == str(tmp_path / "100")
    assert list_versions(str(tmp_path)) == [str(tmp_path / "100")]
    assert "skipping model version" in caplog.text and "300" in caplog.text


def test_a_png_with_a_huge_text_chunk_says_so():
    from PIL import PngImagePlugin
    info = PngImagePlugin.PngInfo()
    info.add_text("comment", "x" * (PngImagePlugin.MAX_TEXT_CHUNK + 10), zip=True)
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), "red").save(buf, format="PNG", pnginfo=info)
    with pytest.raises(Reject) as e:
        normalize_image(buf.getvalue(), "x.png")
    assert e.value.reason == "oversized_metadata" and "MAX_TEXT_CHUNK" in e.value.detail
