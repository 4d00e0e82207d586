"""Image inputs of the prediction jobs: where an image comes from, and the bytes the model gets.

An image to score arrives as a uri (an image file matched by --input, a line of a labels CSV,
a JSON object's "uri", or a GCS object notification's bucket/name) or as bytes (a JSON object's
`{"image_bytes": {"b64": ...}}` or `{"b64": ...}`, TF Serving's convention, or a message whose
data is the image itself). Every image goes through preprocessing.images.checks.normalize_image with
the same --max_side/--jpeg_quality/--max_pixels as preprocess, so the model sees what training
saw; an image preprocess would have written unchanged keeps its bytes. The model's
`predict_raw` signature then decodes them with the TF function training used.
"""
from __future__ import annotations

import base64
import binascii
import os
import threading
import time
from typing import Optional, Tuple

from preprocessing.accounting.rejects import Reject
from preprocessing.images.checks import ImageLimits, normalize_image, read_image

IMAGE_INPUT = "image_bytes"  # the image export's predict_raw input


def normalize_prefixes(text: Optional[str]) -> Tuple[str, ...]:
    """--allowed_uri_prefixes ("gs://b/images/,/srv/images") as folder prefixes ending in
    '/'; local ones made absolute and real (symlinks resolved), as uris are before the check."""
    out = []
    for p in (text or "").split(","):
        p = p.strip()
        if not p:
            continue
        if "://" not in p:
            p = os.path.realpath(p)
        out.append(p if p.endswith("/") else p + "/")
    return tuple(out)


def uri_allowed(uri: str, prefixes: Tuple[str, ...]) -> bool:
    """True when `uri` lies under one of `prefixes` (normalize_prefixes). A local uri is
    compared by its real path ('..' and symlinks resolved); a remote one must not contain
    '.' or '..' segments."""
    if not prefixes or not isinstance(uri, str) or "\x00" in uri:
        return False
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        if any(seg in (".", "..") for seg in rest.split("/")):
            return False
        target = uri
    else:
        if not os.path.isabs(uri):
            return False
        target = os.path.realpath(uri)
    return any(target.startswith(p) for p in prefixes)


class ImageInputs:
    """Turns any image input into normalised bytes for the model (or raises Reject).

    `allowed_prefixes` (None: any uri, as in batch jobs where the operator lists the inputs):
    the only places a uri may point to; anything else is `uri_not_allowed` before any I/O.
    `read_timeout_secs`: the longest one read of a uri may take, tried `read_attempts` times,
    then `uri_read_timeout` (a stuck read keeps its thread, never the message's worker)."""

    def __init__(self, limits: ImageLimits = ImageLimits(),
                 allowed_prefixes: Optional[Tuple[str, ...]] = None,
                 read_timeout_secs: Optional[float] = None, read_attempts: int = 3):
        self.limits = limits
        self.allowed = allowed_prefixes
        self.timeout = read_timeout_secs
        self.attempts = max(1, read_attempts)

    def from_bytes(self, data: bytes, name: str = "") -> bytes:
        return normalize_image(data, name, self.limits, keep_conforming=True).jpeg

    def from_uri(self, uri: str) -> bytes:
        if self.allowed is not None and not uri_allowed(uri, self.allowed):
            raise Reject("uri_not_allowed", "the uri is not under --allowed_uri_prefixes")
        return self.from_bytes(self._read(uri), uri)

    def _read(self, uri: str) -> bytes:
        if not self.timeout:
            return read_image(uri, self.limits.max_image_bytes)
        for attempt in range(self.attempts):
            box, done = {}, threading.Event()

            def work():
                try:
                    box["data"] = read_image(uri, self.limits.max_image_bytes)
                except BaseException as e:  # handed to the caller
                    box["error"] = e
                finally:
                    done.set()
            # A daemon thread: a read that never returns neither blocks this message nor
            # the worker's exit (it ends when the storage client's own deadline passes).
            threading.Thread(target=work, daemon=True, name="uri-read").start()
            if done.wait(self.timeout):
                if "error" in box:
                    raise box["error"]
                return box["data"]
            time.sleep(min(1.0, 0.1 * 2 ** attempt))
        raise Reject("uri_read_timeout", f"no read within {self.timeout:g} s, "
                                         f"{self.attempts} attempts")

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
