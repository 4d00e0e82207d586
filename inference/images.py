"""Image inputs of the prediction jobs: where an image comes from, and the bytes the model gets.

An image to score arrives as a uri (an image file matched by --input, a line of a labels CSV,
a JSON object's "uri", or a GCS object notification's bucket/name) or as bytes (a JSON object's
`{"image_bytes": {"b64": ...}}` or `{"b64": ...}`, TF Serving's convention, or a message whose
data is the image itself). Every image goes through preprocessing.images.normalize_image with
the same --max_side/--jpeg_quality/--max_pixels as preprocess, so the model sees what training
saw; an image preprocess would have written unchanged keeps its bytes. The model's
`predict_raw` signature then decodes them with the TF function training used.
"""
from __future__ import annotations

import base64
import binascii
from typing import Optional, Tuple

from preprocessing.images import DEFAULT_MAX_IMAGE_BYTES, normalize_image, read_image
from preprocessing.rejects import Reject

IMAGE_INPUT = "image_bytes"  # the image export's predict_raw input
LIST_EXTENSIONS = (".csv", ".json", ".jsonl", ".ndjson", ".txt")


class ImageInputs:
    """Turns any image input into normalised bytes for the model (or raises Reject)."""

    def __init__(self, max_side: int = 256, quality: int = 90, max_pixels: int = 50_000_000,
                 max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES):
        self.kw = {"max_side": max_side, "quality": quality, "max_pixels": max_pixels,
                   "keep_conforming": True}
        self.max_image_bytes = max_image_bytes

    def from_bytes(self, data: bytes, name: str = "") -> bytes:
        return normalize_image(data, name, **self.kw).jpeg

    def from_uri(self, uri: str) -> bytes:
        return self.from_bytes(read_image(uri, self.max_image_bytes), uri)

    def from_object(self, obj, attributes: Optional[dict] = None) -> Tuple[bytes, Optional[str]]:
        """A JSON object (or a GCS notification's attributes) -> (bytes, uri or None)."""
        attributes = attributes or {}
        if not isinstance(obj, dict):
            raise Reject("invalid_json", "an image instance must be a JSON object")
        encoded = obj.get(IMAGE_INPUT, obj.get("b64"))
        if isinstance(encoded, dict):
            encoded = encoded.get("b64")
        if encoded is not None:
            if not isinstance(encoded, str):
                raise Reject("invalid_json", "b64 must be a base64 string")
            try:
                data = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError) as e:
                raise Reject("invalid_json", f"b64 is not valid base64 ({e})") from None
            return self.from_bytes(data), obj.get("uri")
        uri = obj.get("uri")
        if not uri and (obj.get("bucket") or attributes.get("bucketId")):
            # A Cloud Storage object notification (JSON_API_V1 payload or its attributes).
            bucket = obj.get("bucket") or attributes.get("bucketId")
            name = obj.get("name") or attributes.get("objectId")
            uri = f"gs://{bucket}/{name}" if name else None
        if not uri or not isinstance(uri, str):
            raise Reject("missing_image", "expected 'uri', 'image_bytes': {'b64': ...}, "
                                              "'b64', or a Cloud Storage notification")
        return self.from_uri(uri), uri
