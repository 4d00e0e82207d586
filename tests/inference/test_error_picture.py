"""The report's error picture: confusion counts equal a direct count, merged parts equal
one pass, and the regression sample stays a bounded sample of real rows."""
from __future__ import annotations

import numpy as np

from inference import error_picture
from inference.error_picture import OTHER, ErrorPicture


def _classes(preds):
    return {"classes": np.asarray([[p.encode()] for p in preds])}


def test_confusion_counts_equal_a_direct_count_whether_merged_or_not():
    rng = np.random.default_rng(0)
    labels = rng.choice(["a", "b", "c"], 500).tolist()
    preds = [y if rng.random() < 0.7 else rng.choice(["a", "b", "c"]) for y in labels]
    whole = ErrorPicture().add_outputs("classification", _classes(preds), labels)
    parts = [ErrorPicture().add_outputs("classification", _classes(preds[i:i + 120]),
                                        labels[i:i + 120]) for i in range(0, 500, 120)]
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merge(p)
    expected = [[sum(y == a and p == b for y, p in zip(labels, preds)) for b in "abc"]
                for a in "abc"]
    for picture in (whole, merged):
        out = picture.to_dict("classification")["confusion_matrix"]
        assert out == {"classes": ["a", "b", "c"], "counts": expected}


def test_rows_without_a_label_are_left_out_and_many_classes_fold_into_other():
    labels = [f"k{i % 30}" for i in range(300)] + [None] * 5
    preds = [f"k{i % 30}" for i in range(300)] + ["k0"] * 5
    out = ErrorPicture().add_outputs("classification", _classes(preds), labels).to_dict(
        "classification")["confusion_matrix"]
    assert len(out["classes"]) == error_picture.MAX_CLASSES + 1 and out["classes"][-1] == OTHER
    assert sum(map(sum, out["counts"])) == 300
    assert out["counts"][-1][-1] == 300 - 10 * error_picture.MAX_CLASSES


def test_the_regression_sample_is_bounded_and_made_of_real_rows():
    rng = np.random.default_rng(1)
    labels = rng.normal(size=5000)
    preds = labels + rng.normal(scale=0.1, size=5000)
    picture = ErrorPicture()
    for i in range(0, 5000, 700):
        part = ErrorPicture().add_outputs("regression",
                                          {"predictions": preds[i:i + 700, None]},
                                          labels[i:i + 700].tolist())
        picture = picture.merge(part)
    sample = picture.to_dict("regression")["residual_sample"]
    assert len(sample["labels"]) == error_picture.SAMPLE
    rows = dict(zip(labels.tolist(), preds.tolist()))
    assert all(rows[y] == p for y, p in zip(sample["labels"], sample["predictions"]))
    # Uniform over the parts: the later rows are not favoured (nor the first).
    late = sum(y in set(labels[2500:].tolist()) for y in sample["labels"])
    assert 400 < late < 600
    assert ErrorPicture().to_dict("regression") == {}
