"""Image inputs: per-image validation and normalisation with a reason for every rejection.

`normalize_image` is what the image preprocessing does to each file: read the bytes, check
they are a real, complete, reasonably sized image of the format their name claims, apply the
EXIF orientation, convert any mode (greyscale, CMYK, palette, alpha) to RGB, bound the longest
side and re-encode as JPEG at a set quality. Anything wrong raises Reject(reason, detail).
"""
from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass

from PIL import Image, ImageOps

from preprocessing.accounting.rejects import Reject

_EXT_FORMATS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".gif": "GIF", ".bmp": "BMP",
                ".webp": "WEBP", ".tif": "TIFF", ".tiff": "TIFF"}


_ORIENTATION = 0x0112  # the EXIF tag
_SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM", b"RIFF")


@dataclass
class NormalizedImage:
    jpeg: bytes
    height: int
    width: int
    source_format: str


MIN_SIDE = 8       # px: smaller images carry nothing a model can learn from
MAX_ASPECT = 32    # longest / shortest side: beyond it, resizing leaves a line of pixels


@dataclass(frozen=True)
class ImageLimits:
    """How images are bounded and normalised: the same for preprocess and both prediction
    jobs (their --max_side, --jpeg_quality, --max_pixels, --max_image_bytes), so the model
    sees what training saw. The only place the defaults are written."""
    max_side: int = 256                  # longest side after resizing (aspect kept)
    jpeg_quality: int = 90               # of the re-encoded JPEG
    max_pixels: int = 50_000_000         # larger images are rejected (decompression bombs)
    max_image_bytes: int = 64 << 20      # larger files are rejected; only this much is read

    @classmethod
    def of(cls, args) -> "ImageLimits":
        """From a job's typed args (or any object with the four flags' attributes)."""
        return cls(args.max_side, args.jpeg_quality, args.max_pixels, args.max_image_bytes)


DEFAULT_MAX_IMAGE_BYTES = ImageLimits.max_image_bytes


def read_image(uri: str, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> bytes:
    """The bytes of an image file (local or any Beam filesystem, gs:// included), reading at
    most `max_bytes` (+1, to tell a larger file). Only regular files are read: a device such as
    /dev/zero, a folder or a pipe is `not_a_file`; a larger file is `image_too_large`; any
    other failure `unreadable_uri`."""

    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    try:
        if "://" not in uri:
            st = os.stat(uri)  # follows links: a link to a device is still a device
            if not stat.S_ISREG(st.st_mode):
                raise Reject("not_a_file", "the uri is not a regular file")
            size = st.st_size
        else:
            found = FileSystems.match([uri])[0].metadata_list
            size = found[0].size_in_bytes if found else None
        if size is not None and size > max_bytes:
            raise Reject("image_too_large", f"{size} bytes, over --max_image_bytes {max_bytes}")
        with FileSystems.open(uri, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            data = f.read(max_bytes + 1)
    except Reject:
        raise
    except Exception as e:
        text = str(e).splitlines()[0][:200] if str(e) else ""
        raise Reject("unreadable_uri", f"{type(e).__name__}: {text}") from None
    if len(data) > max_bytes:  # it grew, or its size was not known
        raise Reject("image_too_large", f"over --max_image_bytes {max_bytes}")
    return data


def normalize_image(data: bytes, name: str = "", limits: ImageLimits = ImageLimits(),
                    keep_conforming: bool = False) -> NormalizedImage:
    """Validates and normalises one image; raises Reject with the reason.

    keep_conforming: an image that is already what normalising makes (an RGB JPEG within
    max_side and without an EXIF rotation) keeps its bytes instead of being re-encoded; the
    prediction jobs use it, so the bytes preprocess wrote score exactly as they are.
    """
    max_side, quality, max_pixels = limits.max_side, limits.jpeg_quality, limits.max_pixels
    if not data:
        raise Reject("empty_file", "zero bytes")
    try:
        img = Image.open(io.BytesIO(data))
        fmt = img.format or "?"
    except Image.DecompressionBombError as e:  # PIL's own bound, past twice its pixel limit
        raise Reject("too_many_pixels", str(e)[:200]) from None
    except Exception as e:  # PIL raises UnidentifiedImageError and friends
        if "too large" in str(e).lower():  # e.g. a PNG text chunk over PIL's bound
            raise Reject("oversized_metadata", str(e)[:200]) from None
        if data.startswith(_SIGNATURES):  # a real image's start, cut short before its header ends
            raise Reject("truncated", f"image header incomplete ({type(e).__name__})") from None
        raise Reject("not_an_image", f"not a decodable image ({type(e).__name__})") from None
    claimed = _EXT_FORMATS.get(os.path.splitext(name.lower())[1])
    if claimed and claimed != fmt:
        raise Reject("format_mismatch", f"named as {claimed} but the bytes are {fmt}")
    w, h = img.size
    if w * h > max_pixels:  # checked before decoding: a decompression bomb never expands
        raise Reject("too_many_pixels", f"{w}x{h} exceeds {max_pixels} pixels")
    if min(w, h) < MIN_SIDE or max(w, h) > MAX_ASPECT * min(w, h):
        raise Reject("degenerate_image", f"{w}x{h}: a side under {MIN_SIDE} px or sides more "
                                         f"than {MAX_ASPECT}:1 apart")
    try:
        img.load()
    except Exception as e:  # truncated data: PIL raises OSError while decoding
        raise Reject("truncated", f"incomplete image data ({str(e)[:120]})") from None
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
