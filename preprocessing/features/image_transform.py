"""The one TF image function shared by training and serving: decode, resize, normalise.

Training maps it over the image bytes of the TFRecords; the exported signatures apply it to the
raw JPEG (or PNG) bytes a caller sends, so nothing is re-implemented at serving time.
"""
from __future__ import annotations

import tensorflow as tf

IMAGE_SIZE = 64


def decode_and_resize(image_bytes: tf.Tensor, size: int = IMAGE_SIZE) -> tf.Tensor:
    """One encoded image (scalar string) -> float32 [size, size, 3] in [0, 1], aspect kept
    (padded), so a square model input never distorts the shape it is meant to recognise."""
    img = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
    img = tf.image.convert_image_dtype(img, tf.float32)
    img = tf.image.resize_with_pad(img, size, size)
    return tf.ensure_shape(img, [size, size, 3])


def decode_batch(image_bytes: tf.Tensor, size: int = IMAGE_SIZE) -> tf.Tensor:
    """[batch] encoded images -> float32 [batch, size, size, 3]."""
    return tf.map_fn(lambda b: decode_and_resize(b, size), image_bytes,
                     fn_output_signature=tf.TensorSpec([size, size, 3], tf.float32))
