"""Image training path: preprocess --format images -> training.task -> an export that takes raw
image bytes through the shared decode function. (Accuracy targets are issue #6's, not here.)"""
import io
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from preprocessing.features.image_transform import IMAGE_SIZE, decode_and_resize
from tests.helpers import make_example
from tools import shapes as shape_gen


def test_decode_and_resize_keeps_aspect_and_range():
    img = Image.new("RGB", (120, 60), (255, 0, 0))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    out = decode_and_resize(tf.constant(buf.getvalue())).numpy()
    assert out.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and 0.0 <= out.min() and out.max() <= 1.0
    assert out[IMAGE_SIZE // 2, IMAGE_SIZE // 2, 0] > 0.95  # the image, red
    assert out[0, IMAGE_SIZE // 2].max() == 0.0              # the padding above it


@pytest.mark.slow
def test_image_model_trains_and_serves_raw_bytes(trained_images):
    shapes, _, m = trained_images
    assert m["task"] == "classification" and m["eval"]["examples"] > 0
    # Accuracy is a share of the eval examples: k / n for a whole number k of correct ones.
    correct = m["eval"]["accuracy"] * m["eval"]["examples"]
    assert abs(correct - round(correct)) < 1e-3, m["eval"]
    loaded = tf.saved_model.load(m["export_dir"])
    import glob
    raw = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(shapes, "*", "*-0000.jpg")))]
    by_bytes = loaded.signatures["predict_raw"](image_bytes=tf.constant(raw))
    by_example = loaded.signatures["serving_default"](
        examples=tf.constant([make_example({"image": b}) for b in raw]))
    np.testing.assert_allclose(by_bytes["probabilities"].numpy(),
                               by_example["probabilities"].numpy(), rtol=1e-5, atol=1e-6)
    classes = {c.decode() for c in by_bytes["classes"].numpy()}
    assert classes <= set(shape_gen.CLASSES)


@pytest.mark.slow
def test_keras_application_backbone_trains_without_downloads_and_exports(trained_images,
                                                                         tmp_path):
    from tests.helpers import small_train_config
    from training import train_and_evaluate
    shapes, data, _ = trained_images
    m = train_and_evaluate(small_train_config(data, str(tmp_path / "job"), epochs=1,
                                              batch_size=16, hidden_units=[16],
                                              backbone="mobilenet_v2"))
    loaded = tf.saved_model.load(m["export_dir"])
    import glob
    raw = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(shapes, "*", "*-0001.jpg")))]
    out = loaded.signatures["predict_raw"](image_bytes=tf.constant(raw))
    assert out["probabilities"].shape == (len(raw), len(shape_gen.CLASSES))
    assert m["eval"]["examples"] > 0  # (weights=None: nothing to download, none here anyway)
