"""Image inputs: a deterministic generator of labelled JPEGs, and per-image validation and
normalisation with a reason for every rejection.

`normalize_image` is what the image preprocessing does to each file: read the bytes, check
they are a real, complete, reasonably sized image of the format their name claims, apply the
EXIF orientation, convert any mode (greyscale, CMYK, palette, alpha) to RGB, bound the longest
side and re-encode as JPEG at a set quality. Anything wrong raises ImageError(reason, detail).

    python -m preprocessing.images --output data/shapes --per_class 200
"""
from __future__ import annotations

import argparse
import csv
import io
import os
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageOps

CLASSES = ("circle", "square", "triangle", "cross")
IMAGE_REASONS = ("empty_file", "not_an_image", "format_mismatch", "truncated",
                 "too_many_pixels", "unreadable_uri", "unknown_label")
_EXT_FORMATS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".gif": "GIF", ".bmp": "BMP",
                ".webp": "WEBP", ".tif": "TIFF", ".tiff": "TIFF"}


_ORIENTATION = 0x0112  # the EXIF tag
_SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM", b"RIFF")


class ImageError(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class NormalizedImage:
    jpeg: bytes
    height: int
    width: int
    source_format: str


def normalize_image(data: bytes, name: str = "", max_side: int = 256, quality: int = 90,
                    max_pixels: int = 50_000_000, keep_conforming: bool = False) -> NormalizedImage:
    """Validates and normalises one image; raises ImageError with the reason.

    keep_conforming: an image that is already what normalising makes (an RGB JPEG within
    max_side and without an EXIF rotation) keeps its bytes instead of being re-encoded; the
    prediction jobs use it, so the bytes preprocess wrote score exactly as they are.
    """
    if not data:
        raise ImageError("empty_file", "zero bytes")
    try:
        img = Image.open(io.BytesIO(data))
        fmt = img.format or "?"
    except Exception as e:  # PIL raises UnidentifiedImageError and friends
        if data.startswith(_SIGNATURES):  # a real image's start, cut short before its header ends
            raise ImageError("truncated", f"image header incomplete ({type(e).__name__})") from None
        raise ImageError("not_an_image", f"not a decodable image ({type(e).__name__})") from None
    claimed = _EXT_FORMATS.get(os.path.splitext(name.lower())[1])
    if claimed and claimed != fmt:
        raise ImageError("format_mismatch", f"named as {claimed} but the bytes are {fmt}")
    w, h = img.size
    if w * h > max_pixels:  # checked before decoding: a decompression bomb never expands
        raise ImageError("too_many_pixels", f"{w}x{h} exceeds {max_pixels} pixels")
    try:
        img.load()
    except Exception as e:  # truncated data: PIL raises OSError while decoding
        raise ImageError("truncated", f"incomplete image data ({str(e)[:120]})") from None
    if (keep_conforming and fmt == "JPEG" and img.mode == "RGB" and max(w, h) <= max_side
            and img.getexif().get(_ORIENTATION, 1) == 1):
        return NormalizedImage(data, h, w, fmt)
    img = ImageOps.exif_transpose(img)
    img = _to_rgb(img)
    if max(img.size) > max_side:
        img.thumbnail((max_side, max_side), Image.LANCZOS)
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=quality)
    return NormalizedImage(out.getvalue(), img.size[1], img.size[0], fmt)


def _to_rgb(img: Image.Image) -> Image.Image:
    if img.mode == "RGB":
        return img
    if img.mode == "P":
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA"):
        # Transparent pixels become white rather than whatever colour they hid.
        background = Image.new("RGB", img.size, (255, 255, 255))
        background.paste(img.convert("RGBA"), mask=img.convert("RGBA").split()[-1])
        return background
    return img.convert("RGB")  # L, 1, CMYK, I, F, YCbCr ...


# ---- generator -----------------------------------------------------------------------------
def draw_shape(rng: np.random.Generator, shape: str, size: int) -> Image.Image:
    """One image: a shape of random size, position, colour and rotation on a noisy background."""
    bg = tuple(int(c) for c in rng.integers(0, 256, 3))
    img = Image.new("RGB", (size, size), bg)
    d = ImageDraw.Draw(img)
    fg = tuple(int((c + rng.integers(80, 176)) % 256) for c in bg)  # contrasts with bg
    r = int(rng.uniform(0.18, 0.4) * size)
    cx, cy = [int(rng.uniform(r + 2, size - r - 2)) for _ in range(2)]
    angle = rng.uniform(0, 2 * np.pi)
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fg)
    elif shape == "square":
        pts = [(cx + r * np.cos(angle + k * np.pi / 2), cy + r * np.sin(angle + k * np.pi / 2))
               for k in range(4)]
        d.polygon(pts, fill=fg)
    elif shape == "triangle":
        pts = [(cx + r * np.cos(angle + k * 2 * np.pi / 3), cy + r * np.sin(angle + k * 2 * np.pi / 3))
               for k in range(3)]
        d.polygon(pts, fill=fg)
    else:  # cross: two bars
        t = max(2, r // 3)
        for a in (angle, angle + np.pi / 2):
            dx, dy = r * np.cos(a), r * np.sin(a)
            d.line([(cx - dx, cy - dy), (cx + dx, cy + dy)], fill=fg, width=t)
    arr = np.asarray(img, dtype=np.int16)
    arr = arr + rng.normal(0, 12, arr.shape).astype(np.int16)  # sensor-like noise
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2)))
    return img


def generate(output_dir: str, per_class: int = 100, seed: int = 42,
             classes=CLASSES, min_size: int = 48, max_size: int = 128) -> str:
    """Writes `<output>/<class>/<class>-NNNN.jpg` and `<output>/labels.csv` (uri,label)."""
    rng = np.random.default_rng(seed)
    rows = []
    for cls in classes:
        os.makedirs(os.path.join(output_dir, cls), exist_ok=True)
    for i in range(per_class):
        for cls in classes:
            size = int(rng.integers(min_size, max_size + 1))
            path = os.path.join(output_dir, cls, f"{cls}-{i:04d}.jpg")
            draw_shape(rng, cls, size).save(path, format="JPEG",
                                            quality=int(rng.integers(70, 96)))
            rows.append((os.path.abspath(path), cls))
    labels = os.path.join(output_dir, "labels.csv")
    with open(labels, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["uri", "label"])
        w.writerows(rows)
    return labels


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", required=True)
    ap.add_argument("--per_class", type=int, default=100)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args(argv)
    labels = generate(a.output, a.per_class, a.seed)
    print(f"wrote {a.per_class * len(CLASSES)} images of {list(CLASSES)} and {labels}")


if __name__ == "__main__":
    main()
