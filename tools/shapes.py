"""A deterministic generator of labelled JPEG shapes (circle, square, triangle, cross) for the
image demo, tests and benchmarks.

    python -m tools.shapes --output data/shapes --per_class 200
"""
from __future__ import annotations

import argparse
import csv
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

CLASSES = ("circle", "square", "triangle", "cross")


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


def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height pixels (a decompression bomb's header:
    what an image check must refuse before decoding)."""
    import struct
    import zlib

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


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
