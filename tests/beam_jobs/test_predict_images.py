"""Image models in the prediction jobs: batch_predict over image files, labels CSVs and JSON
lines (uris or base64 bytes), stream_predict over uri / base64 / GCS-notification messages,
dead letters with reasons, and the same bytes giving the same prediction as the signature."""
import base64
import glob
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from beam_jobs import batch_predict, stream_predict
from inference.inputs.image_sources import ImageInputs
from tests.helpers import read_jsonl
from tools import shapes as shape_gen

pytestmark = pytest.mark.slow


def _signature(export_dir, raw):
    fn = tf.saved_model.load(export_dir).signatures["predict_raw"]
    out = fn(image_bytes=tf.constant(raw))
    return out["probabilities"].numpy(), [c.decode() for c in out["classes"].numpy()]


def _files(shapes, n_per_class=3):
    return sorted(p for c in shape_gen.CLASSES
                  for p in sorted(glob.glob(os.path.join(shapes, c, "*.jpg")))[:n_per_class])


def test_batch_predict_images_from_files_lists_and_json(trained_images, tmp_path):
    shapes, _, m = trained_images
    good = _files(shapes)
    src = tmp_path / "in"
    for p in good:  # a folder of class folders, as preprocess takes
        dst = src / os.path.basename(os.path.dirname(p))
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dst)
    bad = src / "circle"
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "text.jpg").write_bytes(b"hello, not an image")
    (bad / "cut.jpg").write_bytes(open(good[0], "rb").read()[:300])
    png = bad / "disguised.jpg"
    shape_gen.draw_shape(np.random.default_rng(0), "circle", 64).save(png, format="PNG")
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "labels.csv").write_text(
        "uri,label\n" + f"{good[0]},circle\n" + "missing.jpg,square\n" + "a,b,c\n")
    b64 = base64.b64encode(open(good[1], "rb").read()).decode()
    (lists / "more.jsonl").write_text("\n".join([
        json.dumps({"image_bytes": {"b64": b64}, "key": "inline-1", "label": "circle"}),
        json.dumps({"b64": b64}),
        json.dumps({"uri": good[2]}),
        json.dumps({"b64": "***"}),
        json.dumps({"nothing": 1}),
        "not json",
    ]) + "\n")
    out = tmp_path / "out"
    s = batch_predict.run(["--model_dir", m["export_dir"], "--input",
                           f"{src}/*/*.jpg,{lists}/*", "--output", str(out),
                           "--evaluate_label", "label", "--min_batch_size", "1", "--max_batch_size", "5",
                           "--output_format", "both"])
    assert s["reconciled"] and s["rows_read"] == len(good) + 4 + 3 + 6
    assert s["rejected"]["by_reason"] == {
        "empty_file": 1, "not_an_image": 1, "truncated": 1, "format_mismatch": 1,
        "unreadable_uri": 1, "wrong_column_count": 1, "invalid_json": 2, "missing_image": 1}
    preds = read_jsonl(str(out / "predictions-*.jsonl"))
    assert len(preds) == s["rows_predicted"] == len(good) + 1 + 3
    by_key = {p["key"]: p for p in preds}
    assert {str(src / os.path.basename(os.path.dirname(p)) / os.path.basename(p))
            for p in good} <= set(by_key)
    assert "inline-1" in by_key and good[0] in by_key and good[2] in by_key
    for p in preds:
        assert p["class"] in shape_gen.CLASSES
        assert p["class_id"] == int(np.argmax(p["probabilities"]))
        assert abs(sum(p["probabilities"]) - 1) < 1e-4 and p["model_version"]
    rejects = read_jsonl(str(out / "rejects" / "*.jsonl"))
    assert len(rejects) == s["rejected"]["total"]
    assert {r["raw"] for r in rejects if r["reason"] == "empty_file"} == {str(bad / "empty.jpg")}
    # Labels from class folders, the labels CSV and the JSON lines: accuracy over all of them.
    metrics = json.load(open(out / "metrics.json"))
    labelled = [p for p in preds if p.get("label")]
    assert metrics["examples"] == len(labelled) == len(good) + 1 + 1
    assert metrics["accuracy"] == pytest.approx(
        np.mean([p["class"] == p["label"] for p in labelled]))
    assert glob.glob(str(out / "predictions-*.csv"))


def test_same_bytes_same_prediction_through_the_signature_and_the_batch_job(trained_images,
                                                                            tmp_path):
    shapes, _, m = trained_images
    files = _files(shapes, 2)
    raw = [open(p, "rb").read() for p in files]
    # Generated images are already what preprocess's normalisation makes: bytes kept as is.
    assert [ImageInputs().from_bytes(b) for b in raw] == raw
    want_probs, want_classes = _signature(m["export_dir"], raw)
    (tmp_path / "b64.jsonl").write_text("\n".join(
        json.dumps({"key": f"k{i}", "image_bytes": {"b64": base64.b64encode(b).decode()}})
        for i, b in enumerate(raw)) + "\n")
    for inp, keys in ((",".join(files), files),
                      (str(tmp_path / "b64.jsonl"), [f"k{i}" for i in range(len(raw))])):
        out = tmp_path / f"out{len(inp)}"
        batch_predict.run(["--model_dir", m["export_dir"], "--input", inp,
                           "--output", str(out)])
        by_key = {p["key"]: p for p in read_jsonl(str(out / "predictions-*.jsonl"))}
        got = np.array([by_key[k]["probabilities"] for k in keys])
        np.testing.assert_allclose(got, want_probs, rtol=1e-5, atol=1e-6)
        assert [by_key[k]["class"] for k in keys] == want_classes


def test_stream_predict_image_messages(trained_images, tmp_path, gcs_emulator):
    from apache_beam.io.filesystems import FileSystems
    shapes, _, m = trained_images
    files = _files(shapes, 1)
    raw = [open(p, "rb").read() for p in files]
    with FileSystems.create("gs://test-bucket/incoming/shape.jpg") as f:
        f.write(raw[0])
    lines = [
        json.dumps({"id": "by-uri", "event_time": 1_700_000_000, "data": {"uri": files[1]}}),
        json.dumps({"id": "by-b64", "event_time": 1_700_000_001,
                    "data": {"image_bytes": {"b64": base64.b64encode(raw[2]).decode()}}}),
        json.dumps({"id": "raw-bytes", "event_time": 1_700_000_002,
                    "data_b64": base64.b64encode(raw[3]).decode()}),
        json.dumps({"id": "gcs", "event_time": 1_700_000_003,
                    "data": {"kind": "storage#object", "bucket": "test-bucket",
                             "name": "incoming/shape.jpg"}}),
        json.dumps({"id": "gone", "event_time": 1_700_000_004,
                    "data": {"bucket": "test-bucket", "name": "incoming/none.jpg"}}),
        json.dumps({"id": "junk", "event_time": 1_700_000_005,
                    "data_b64": base64.b64encode(b"\x00junk").decode()}),
        json.dumps({"id": "local-secret", "event_time": 1_700_000_006,
                    "data": {"uri": "/etc/passwd"}}),
        json.dumps({"id": "other-bucket", "event_time": 1_700_000_007,
                    "data": {"bucket": "other-bucket", "name": "incoming/shape.jpg"}}),
    ]
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    allowed = f"{os.path.dirname(files[1])},gs://test-bucket/incoming/"
    stream_predict.run(["--streaming", "--model_dir", m["export_dir"], "--replay", str(src),
                        "--replay_rate", "50", "--output_dir", str(out), "--window_secs", "5",
                        "--allowed_uri_prefixes", allowed])
    preds = {p["id"]: p for p in read_jsonl(str(out / "predictions-*.jsonl"))}
    rejects = {r["id"]: r["reason"] for r in read_jsonl(str(out / "rejects" / "*.jsonl"))}
    assert set(preds) == {"by-uri", "by-b64", "raw-bytes", "gcs"}
    assert rejects == {"gone": "unreadable_uri", "junk": "not_an_image",
                       "local-secret": "uri_not_allowed", "other-bucket": "uri_not_allowed"}
    want_probs, want_classes = _signature(m["export_dir"], [raw[1], raw[2], raw[3], raw[0]])
    for i, mid in enumerate(["by-uri", "by-b64", "raw-bytes", "gcs"]):
        assert preds[mid]["class"] == want_classes[i]
        np.testing.assert_allclose(preds[mid]["probabilities"], want_probs[i], rtol=1e-5,
                                   atol=1e-6)


def test_image_inputs_parse_every_form_and_give_reasons(tmp_path):
    from preprocessing.accounting.rejects import Reject
    img = tmp_path / "a.jpg"
    shape_gen.draw_shape(np.random.default_rng(1), "square", 64).save(img, format="JPEG")
    data = img.read_bytes()
    ii = ImageInputs()
    assert ii.from_object({"uri": str(img)}) == (data, str(img))
    assert ii.from_object({"image_bytes": {"b64": base64.b64encode(data).decode()}})[0] == data
    big = tmp_path / "big.png"
    shape_gen.draw_shape(np.random.default_rng(1), "square", 600).save(big, format="PNG")
    small = ii.from_bytes(big.read_bytes())  # normalised as preprocess does: RGB JPEG <= 256
    import io

    from PIL import Image
    assert Image.open(io.BytesIO(small)).format == "JPEG"
    assert max(Image.open(io.BytesIO(small)).size) == 256
    for obj, reason in (({"b64": "@@"}, "invalid_json"), ({}, "missing_image"), ([], "invalid_json"),
                        ({"uri": str(tmp_path / "none.jpg")}, "unreadable_uri"),
                        ({"b64": base64.b64encode(b"GIF89a").decode()}, "truncated")):
        with pytest.raises(Reject) as e:
            ii.from_object(obj)
        assert e.value.reason == reason
