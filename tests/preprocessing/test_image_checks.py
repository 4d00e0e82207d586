"""Image generator and per-image validation/normalisation: every rejection reason, every mode."""
import csv
import io
import os

import numpy as np
import pytest
from PIL import Image

from preprocessing.accounting import rejects
from preprocessing.accounting.rejects import Reject
from preprocessing.images.checks import ImageLimits, normalize_image
from tools import shapes as shape_gen


def _encode(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def good_jpeg():
    rng = np.random.default_rng(0)
    return _encode(shape_gen.draw_shape(rng, "circle", 96), "JPEG", quality=90)


def test_generator_is_deterministic_and_labelled(tmp_path):
    a = shape_gen.generate(str(tmp_path / "a"), per_class=3, seed=5)
    b = shape_gen.generate(str(tmp_path / "b"), per_class=3, seed=5)
    rows_a = list(csv.DictReader(open(a)))
    assert len(rows_a) == 3 * len(shape_gen.CLASSES)
    assert {r["label"] for r in rows_a} == set(shape_gen.CLASSES)
    for ra, rb in zip(rows_a, csv.DictReader(open(b))):
        assert open(ra["uri"], "rb").read() == open(rb["uri"], "rb").read()
        assert os.path.basename(os.path.dirname(ra["uri"])) == ra["label"]
        assert Image.open(ra["uri"]).format == "JPEG"


def test_bad_image_corpus_each_reason(good_jpeg):
    corpus = {
        "empty_file": (b"", "a.jpg"),
        "not_an_image": (b"this is text, not pixels" * 10, "b.jpg"),
        "truncated": (good_jpeg[: len(good_jpeg) // 2], "c.jpg"),
        "format_mismatch": (_encode(Image.new("RGB", (20, 20), "red"), "PNG"), "d.jpg"),
        "too_many_pixels": (_encode(Image.new("L", (400, 300)), "PNG"), "e.png"),
    }
    for reason, (data, name) in corpus.items():
        with pytest.raises(Reject) as e:
            normalize_image(data, name, ImageLimits(max_pixels=100_000))
        assert e.value.reason == reason, (name, e.value)
        assert reason in rejects.REASONS


@pytest.mark.parametrize("mode, fmt, name", [
    ("L", "JPEG", "g.jpg"), ("CMYK", "JPEG", "c.jpg"), ("P", "PNG", "p.png"),
    ("RGBA", "PNG", "a.png"), ("LA", "PNG", "la.png"), ("1", "BMP", "b.bmp")])
def test_every_mode_becomes_rgb_jpeg(mode, fmt, name):
    img = Image.new(mode, (50, 40))
    out = normalize_image(_encode(img, fmt), name)
    decoded = Image.open(io.BytesIO(out.jpeg))
    assert decoded.format == "JPEG" and decoded.mode == "RGB"
    assert (out.width, out.height) == (50, 40) == decoded.size


def test_transparent_pixels_become_white():
    img = Image.new("RGBA", (10, 10), (255, 0, 0, 0))  # fully transparent red
    out = Image.open(io.BytesIO(normalize_image(_encode(img, "PNG"), "t.png").jpeg))
    assert min(out.getpixel((5, 5))) > 240


def test_exif_orientation_is_applied():
    img = Image.new("RGB", (60, 20), "blue")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90° clockwise: display is 20 wide, 60 high
    out = normalize_image(_encode(img, "JPEG", exif=exif.tobytes()), "o.jpg")
    assert (out.width, out.height) == (20, 60)


def test_longest_side_is_bounded_keeping_aspect(good_jpeg):
    big = _encode(Image.new("RGB", (600, 300), "green"), "JPEG")
    out = normalize_image(big, "big.jpg", ImageLimits(max_side=200))
    assert (out.width, out.height) == (200, 100)
    small = normalize_image(good_jpeg, "s.jpg", ImageLimits(max_side=200))
    assert (small.width, small.height) == (96, 96)


def test_a_png_claiming_900_megapixels_is_too_many_pixels_before_decoding():
    from preprocessing.accounting.rejects import Reject
    from preprocessing.images.checks import normalize_image
    with pytest.raises(Reject) as e:
        normalize_image(shape_gen.png_claiming(30000, 30000), "bomb.png")
    assert e.value.reason == "too_many_pixels"
