"""Model families (training --model): boosted trees in the network's export contract, `auto`
choosing by the validation slice, and the robustness rules every family keeps (inputs and
back-transformed targets bounded by what training saw; early stopping only on a slice large
enough to measure)."""
from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from beam_jobs import batch_predict
from preprocessing.contract.split import boundaries, split_index
from preprocessing.files import saved_models
from preprocessing.reference import golden
from tests.helpers import GOOD, keras_layers_saved, read_jsonl, small_train_config
from training import defaults
from training.data import HOLDOUT_BUCKETS, load_feature_info, split_files
from training.target import read_labels


def _forest_sizes(export_dir) -> list:
    """The trees of each forest an export's init graph loads (YDF reads them from assets/)."""
    import ydf

    from tools.tfdf_serving_check import forests
    return [ydf.load_model(os.path.join(export_dir, "assets"),
                           ydf.ModelIOOptions(file_prefix=os.path.basename(p))).num_trees()
            for p in forests(export_dir)]


def _eval_csv(data_dir, src, dest):
    """The rows of `src` that preprocess put in the eval split."""
    bounds = boundaries(json.load(open(os.path.join(data_dir, "summary.json")))["split_fractions"])
    with open(src, newline="") as f, open(dest, "w", newline="") as g:
        reader, writer = csv.reader(f), csv.writer(g)
        writer.writerow(next(reader))
        for row in reader:
            if split_index(row[0], bounds) == 1:
                writer.writerow(row)
    return str(dest)


def _train_label_range(data_dir):
    info = load_feature_info(data_dir)
    labels = read_labels(split_files(data_dir, "train"), info.label)
    return float(labels.min()), float(labels.max())


@pytest.mark.slow
def test_boosted_trees_export_keeps_the_network_contract(trained_trees):
    data_dir, job_dir, m = trained_trees
    export = m["export_dir"]
    assert m["model"]["family"] == "boosted_trees" and "history" not in m
    # Under 10,000 train rows every tree is grown (no early stopping on a slice of them).
    trees = m["model"]["candidates"]["boosted_trees"]
    assert trees["early_stopping"] is False and trees["num_trees"] == 60
    assert json.load(open(os.path.join(export, "assets.extra", "model.json")))["family"] == \
        "boosted_trees"
    for name in ("raw_schema.json", "golden.tfrecord", "train_statistics.json"):
        assert os.path.exists(os.path.join(export, "assets.extra", name)), name
    assert os.path.exists(os.path.join(job_dir, "serving", "models.config"))
    loaded = saved_models.load(export)
    assert {"serving_default", "predict_raw", "regress"} <= set(loaded.signatures)
    fn = loaded.signatures["predict_raw"]
    raw = {k: tf.constant([GOOD[k]], spec.dtype)
           for k, spec in fn.structured_input_signature[1].items()}
    pred = fn(**raw)["predictions"].numpy()
    low, high = _train_label_range(data_dir)
    assert pred.shape == (1,) and low <= pred[0] <= high


@pytest.mark.slow
def test_boosted_trees_batch_predict_reproduces_the_trainers_eval(trained_trees, taxi_csv,
                                                                  tmp_path):
    data_dir, _, m = trained_trees
    eval_csv = _eval_csv(data_dir, taxi_csv[0], tmp_path / "eval.csv")
    s = batch_predict.run(["--model_dir", m["export_dir"], "--input", eval_csv,
                           "--output", str(tmp_path / "out"), "--evaluate_label", "fare_amount"])
    assert s["metrics"]["examples"] == m["eval"]["examples"]
    assert s["metrics"]["rmse"] == pytest.approx(m["eval"]["rmse"], rel=1e-4)


@pytest.mark.slow
def test_boosted_trees_behind_the_gate_and_as_a_shadow(trained, trained_trees, taxi_csv,
                                                       tmp_path):
    import shutil
    base = tmp_path / "models"
    shutil.copytree(trained[2]["export_dir"], base / "100")
    shutil.copytree(trained_trees[2]["export_dir"], base / "200")
    s = batch_predict.run(["--model_dir", str(base), "--input", taxi_csv[0],
                           "--output", str(tmp_path / "out"), "--evaluate_label", "fare_amount"])
    gate = s["model_gate"]
    assert gate["candidate_version"] == "200" and gate["current_version"] == "100"
    # The trees are scored on the golden set like any version, and the gate's rule decides.
    better = gate["candidate_metric"] <= gate["current_metric"] * 1.05
    assert gate["event"] == ("version_accepted" if better else "version_refused"), gate
    serving = "200" if better else "100"
    assert s["model_version"] == serving
    preds = read_jsonl(str(tmp_path / "out" / "predictions-*.jsonl"))
    assert {p["model_version"] for p in preds} == {serving}
    # The trees as the network's shadow: compared row by row, outputs untouched.
    s = batch_predict.run(["--model_dir", trained[2]["export_dir"], "--input", taxi_csv[0],
                           "--output", str(tmp_path / "shadowed"), "--evaluate_label",
                           "fare_amount", "--shadow_model_dir", trained_trees[2]["export_dir"]])
    shadow = s["shadow"]
    assert shadow["compared"] == s["rows_predicted"] > 0
    assert shadow["serving_metrics"]["rmse"] == pytest.approx(s["metrics"]["rmse"], rel=1e-9)
    assert shadow["shadow_metrics"]["rmse"] != shadow["serving_metrics"]["rmse"]
    assert shadow["mean_abs_diff"] > 0


@pytest.mark.slow
def test_boosted_trees_stream(trained_trees, tmp_path):
    from apache_beam.testing.test_stream import TestStream as EventStream

    from tests.beam_jobs.test_stream_predict import _cfg, _outputs, _run, msg
    stream = (EventStream().advance_watermark_to(0)
              .add_elements([msg("a"), msg("b", {"pickup_datetime": "nope"}), msg("c")])
              .advance_watermark_to_infinity())
    cfg, options = _cfg(tmp_path, trained_trees[2]["export_dir"])
    _run(cfg, options, stream)
    preds, rejects, _ = _outputs(tmp_path)
    assert sorted(p["id"] for p in preds) == ["a", "c"]
    assert {r["id"]: r["reason"] for r in rejects} == {"b": "unparsable_datetime"}
    assert all(np.isfinite(p["prediction"]) for p in preds)


@pytest.mark.slow
def test_the_kept_shapes_folds_grow_past_the_cap_while_their_loss_falls(preprocessed, tmp_path,
                                                                       monkeypatch):
    """--num_trees unset: where the folds' best count comes within FOLD_LOOK_AHEAD rounds of
    NUM_TREES, the kept shape's folds are grown again to at most FOLD_MAX_TREES, and the
    trees exported keep the count lowest over them (here 8, 3 and 60 for 300, 50 and 1000:
    8 trees at a shrinkage of 0.05 are far from the best count)."""
    from training import train_and_evaluate
    monkeypatch.setattr(defaults, "NUM_TREES", 8)
    monkeypatch.setattr(defaults, "FOLD_LOOK_AHEAD", 3)
    monkeypatch.setattr(defaults, "FOLD_MAX_TREES", 60)
    data_dir, _ = preprocessed
    m = train_and_evaluate(small_train_config(data_dir, str(tmp_path / "job"), model="auto",
                                              epochs=1, hidden_units=[8], importance_rows=0))
    assert m["model"]["num_trees"]["value"] == 8
    assert m["model"]["num_trees"]["grown_again_to"] == 60
    kept = m["model"]["candidates"]["boosted_trees"]["refit_num_trees"]
    assert 8 < kept["value"] <= 60 and kept["why"].startswith("of at most 60,")
    # Grown again on the whole train split (4/3 of a fold's rows), a regression's trees
    # keep 4/3 of that count, at most the 60 the folds grew (defaults.refit_rounds).
    assert kept["grown"]["refit_rows"]["value"] == min(60, round(kept["value"] * 4 / 3)), kept
    if m["model"]["family"] != "wide_deep":
        sizes = _forest_sizes(m["export_dir"])
        last = "exported_rows" if m["model"]["refit_on_eval"]["value"] else "refit_rows"
        assert sizes and set(sizes) == {kept["grown"][last]["value"]}, (sizes, kept)


@pytest.mark.slow
def test_auto_keeps_the_family_better_on_the_validation_slice(preprocessed, taxi_csv, tmp_path):
    from tests.training.test_golden_rows import with_golden
    from training import train_and_evaluate
    # A golden set of 50 of the eval split's rows, under golden_score.NOISY_ROWS: every eval
    # row is added to the model exported, and the export says it learned its golden set (the
    # whole eval split of this small table is the default golden set, of over 240 rows).
    data_dir = with_golden(preprocessed[0], tmp_path / "data", keep=50)
    m = train_and_evaluate(small_train_config(data_dir, str(tmp_path / "job"), model="auto",
                                              num_trees=60))
    model = m["model"]
    cands = model["candidates"]
    assert set(cands) == {"wide_deep", "boosted_trees", "blend"}
    # A small train split: the choice is cross-fitted over 4 folds, every train row scored
    # once by a network and trees trained without it, never a row of the eval split.
    folds = defaults.CHOICE_FOLDS
    assert model["choice_folds"]["value"] == folds
    # the flag given wins: no growing past it
    assert model["num_trees"] == {"value": 60, "grown_again_to": None, "why": "--num_trees"}
    assert model["chosen_by"].startswith(f"{folds} cross-fitted folds of ")
    rmse = {n: c["validation"]["rmse"] for n, c in cands.items()}
    if model["family"] != "blend":  # one family is kept only when clearly better there
        other = ({"wide_deep", "boosted_trees"} - {model["family"]}).pop()
        assert rmse[model["family"]] < rmse[other] and "clearly lower" in model["chosen_by"]
    else:  # its weight, chosen on the same rows, and why
        from training.choice_rules import BLEND_WEIGHTS
        weight = cands["blend"]["network_weight"]
        assert weight in BLEND_WEIGHTS and f"the network weighs {weight}" in model["chosen_by"]
    train_rows = json.load(open(os.path.join(data_dir, "summary.json")))["splits"]["train"]
    scored = {c["validation"]["examples"] for c in cands.values()}
    assert scored == {train_rows}
    # The first fold's trees were grown without about a quarter of the rows.
    assert 0.65 * train_rows < cands["boosted_trees"]["rows"] < 0.85 * train_rows
    # The families kept (alone or in the blend) are trained again on the whole train split
    # (the network too: no early stopping used the slice), and the eval figure is theirs.
    if model["family"] != "wide_deep":
        assert cands["boosted_trees"]["refit_rows"] == train_rows
        # ... as many trees as scored lowest over the folds.
        kept_trees = cands["boosted_trees"]["refit_num_trees"]["value"]
        assert 1 <= kept_trees <= 60 and "cross-fitted folds" in \
            cands["boosted_trees"]["refit_num_trees"]["why"]
    if model["family"] != "boosted_trees":
        assert cands["wide_deep"]["refit_rows"] == train_rows
    if model["family"] != "wide_deep":  # forests averaged where their seed changes them
        from tools.tfdf_serving_check import forests
        from training.models.forests import seeded
        from training.models.trees import TreesShape, shape_cfg
        t = cands["boosted_trees"]
        shape = TreesShape(t["split_axis"]["value"], t["category_encoding"]["value"],
                           t["categorical_algorithm"]["value"])
        want = defaults.FORESTS if seeded(shape_cfg(small_train_config("d", "j"), shape)) else 1
        assert t["num_forests"]["value"] == want, t["num_forests"]
        assert len(forests(m["export_dir"])) == want
    assert m["eval"]["examples"] == cands[model["family"]]["eval"]["examples"]
    assert m["eval"] != cands[model["family"]]["eval"]
    family = json.load(open(os.path.join(m["export_dir"], "assets.extra", "model.json")))
    assert family["family"] == model["family"]
    # Then trained a last time with the eval split's rows too: the eval figure above is the
    # model trained without them; the exported one has learned them (its RMSE on the eval
    # rows falls), the 50 golden rows among them, and says so.
    eval_rows = json.load(open(os.path.join(data_dir, "summary.json")))["splits"]["eval"]
    refit = model["refit_on_eval"]
    assert refit["value"] is True and "the golden set's 50 too" in refit["why"]
    added = eval_rows
    assert "kept model trained on the train split alone" in m["eval"]["measured_on"]
    learned = json.load(open(os.path.join(m["export_dir"], golden.EXPORT_GOLDEN_LEARNED)))
    assert learned["learned"] is True and refit["why"].endswith(": " + learned["why"])
    if model["family"] != "wide_deep":
        assert cands["boosted_trees"]["exported_rows"] == train_rows + added
        # Regression trees grown again on more rows than a fold's keep more rounds, at
        # most the 60 given (defaults.refit_rounds); each exported forest holds that many.
        count = cands["boosted_trees"]["refit_num_trees"]
        fold_rows = train_rows * (folds - 1) / folds
        for key, rows in (("refit_rows", train_rows), ("exported_rows", train_rows + added)):
            assert count["grown"][key]["value"] == min(60, round(count["value"] * rows
                                                                  / fold_rows)), count
        assert count["grown"]["exported_rows"]["value"] > count["value"] or \
            count["value"] == 60
        sizes = _forest_sizes(m["export_dir"])
        assert sizes and set(sizes) == {count["grown"]["exported_rows"]["value"]}, sizes
    if model["family"] != "boosted_trees":
        assert cands["wide_deep"]["exported_rows"] == train_rows + added
    s = batch_predict.run(["--model_dir", m["export_dir"], "--input",
                           _eval_csv(data_dir, taxi_csv[0], tmp_path / "eval.csv"), "--output",
                           str(tmp_path / "out"), "--evaluate_label", "fare_amount"])
    assert s["metrics"]["examples"] == m["eval"]["examples"]
    exported = s["metrics"]["rmse"]
    # The same model unchanged would score exactly m["eval"]; one run on CI gave 0.903x.
    assert exported < 0.97 * m["eval"]["rmse"], (exported, m["eval"]["rmse"])


@pytest.mark.slow
def test_blend_export_reproduces_the_trainers_eval(trained_blend, taxi_csv, tmp_path):
    data_dir, _, m = trained_blend
    assert m["model"]["family"] == "blend" and m["model"]["chosen_by"] == "--model blend"
    export = m["export_dir"]
    assert json.load(open(os.path.join(export, "assets.extra", "model.json")))["family"] == \
        "blend"
    assert keras_layers_saved(export) == 0  # the blend's network: its variables only
    eval_csv = _eval_csv(data_dir, taxi_csv[0], tmp_path / "eval.csv")
    s = batch_predict.run(["--model_dir", export, "--input", eval_csv,
                           "--output", str(tmp_path / "out"), "--evaluate_label", "fare_amount"])
    assert s["metrics"]["examples"] == m["eval"]["examples"]
    assert s["metrics"]["rmse"] == pytest.approx(m["eval"]["rmse"], rel=1e-4)
    low, high = _train_label_range(data_dir)
    preds = [p["prediction"] for p in read_jsonl(str(tmp_path / "out" / "predictions-*.jsonl"))]
    assert preds and all(low <= p <= high for p in preds)


@pytest.mark.slow
def test_an_input_far_outside_the_training_range_predicts_within_the_labels(trained, tmp_path):
    """A malformed row (a trip across the globe, 10,000 passengers) reaches the network as the
    largest values training saw, and the back-transformed prediction stays within the train
    labels' range."""
    data_dir, _, m = trained
    low, high = _train_label_range(data_dir)
    rows = [dict(GOOD, key="normal"),
            dict(GOOD, key="far", dropoff_longitude=0.0, dropoff_latitude=0.0,
                 passenger_count=10_000),
            dict(GOOD, key="max", passenger_count=1_000_000)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = batch_predict.run(["--model_dir", m["export_dir"], "--input", str(src),
                           "--output", str(tmp_path / "out")])
    assert s["rows_predicted"] == 3
    preds = {p["key"]: p["prediction"] for p in read_jsonl(str(tmp_path / "out" / "*.jsonl"))}
    assert all(low <= p <= high for p in preds.values()), (preds, low, high)
    # Both passenger counts are past the train maximum: the model sees the same value.
    far_max = dict(rows[1], key="far_max", passenger_count=1_000_000)
    src.write_text(json.dumps(rows[1]) + "\n" + json.dumps(far_max) + "\n")
    batch_predict.run(["--model_dir", m["export_dir"], "--input", str(src),
                       "--output", str(tmp_path / "out2")])
    p = {r["key"]: r["prediction"] for r in read_jsonl(str(tmp_path / "out2" / "*.jsonl"))}
    assert p["far"] == pytest.approx(p["far_max"], rel=1e-6)


def test_auto_keeps_the_blend_unless_one_family_is_clearly_better_on_the_same_rows():
    from training.choice_rules import choose_family
    rng = np.random.default_rng(0)
    loss = rng.normal(1.0, 0.5, 400) ** 2

    def kept(net, trees, blend):
        return choose_family({"wide_deep": net, "boosted_trees": trees, "blend": blend},
                             "wide_deep")
    noise = loss + rng.normal(-0.01, 0.5, 400)    # lower on average, within the noise
    k, why = kept(loss, noise, (loss + noise) / 2)
    assert k == "blend" and "400 rows" in why and "neither clearly lower" in why
    # The network far worse on every row: averaging it in costs, the trees are kept ...
    assert kept(loss + 1.0, loss, loss + 0.5)[0] == "boosted_trees"
    assert kept(loss, loss + 1.0, loss + 0.5)[0] == "wide_deep"
    # ... unless the blend is clearly lower than the better family too.
    assert kept(loss + 1.0, loss, loss - 0.2)[0] == "blend"


def test_a_blend_kept_weighs_the_network_otherwise_only_where_clearly_lower():
    from training.choice_rules import BLEND_WEIGHTS, blend_name, choose_blend_weight
    assert blend_name(0.5) == "blend" and blend_name(0.25) == "blend@0.25"
    rng = np.random.default_rng(1)
    net, trees = rng.normal(0.0, 1.0, 300), rng.normal(0.0, 0.5, 300)

    def losses(label):
        return {w: (w * net + (1 - w) * trees - label) ** 2 for w in BLEND_WEIGHTS}
    weight, why = choose_blend_weight(losses(0.9 * trees + 0.1 * net))  # nearer the trees
    assert weight == 0.25 and "the network weighs 0.25" in why and "0.75 " in why
    assert choose_blend_weight(losses(0.9 * net + 0.1 * trees))[0] == 0.75
    # Lower on average but within the noise of the paired difference: half each.
    half = rng.normal(1.0, 0.5, 300) ** 2
    e = rng.normal(0.0, 0.5, 300)
    noisy = {0.5: half, 0.25: half - 0.01 + e - e.mean(), 0.75: half + 0.1}
    assert np.mean(noisy[0.25]) < np.mean(half) and choose_blend_weight(noisy)[0] == 0.5
    assert choose_blend_weight({w: np.ones(40) for w in BLEND_WEIGHTS})[0] == 0.5


def test_classifiers_are_compared_by_the_brier_score_of_their_probabilities():
    from training.reporting.losses import row_losses
    y, w = np.array([0, 1, 1]), np.array([1.0, 1.0, 0.0])   # the last class unseen in train
    sure = np.log(np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]]))
    np.testing.assert_allclose(row_losses(sure, y, w), [0.02, 0.08])
    # Both right, but the one less sure loses more: a 0/1 loss could not tell them apart.
    unsure = np.log(np.array([[0.6, 0.4], [0.4, 0.6], [0.5, 0.5]])) + 3.0  # logits shift
    assert (row_losses(unsure, y, w) > row_losses(sure, y, w)).all()
    np.testing.assert_allclose(row_losses(np.array([2.0, 5.0]), np.array([1.0, 1.0])), [1, 16])


def test_auto_does_not_decide_on_a_slice_too_small_to_tell():
    from training.choice_rules import MIN_DECISION_ROWS, choose_family

    def trees_lower(n):  # the trees lower by 0.5 on every row, give or take 0.01
        trees = 0.5 + 0.01 * (np.arange(n) % 2)
        return {"wide_deep": np.ones(n), "boosted_trees": trees, "blend": (trees + 1) / 2}
    kept, why = choose_family(trees_lower(MIN_DECISION_ROWS - 1), "wide_deep")
    assert kept == "blend" and "too few" in why
    assert choose_family(trees_lower(MIN_DECISION_ROWS), "wide_deep")[0] == "boosted_trees"


def test_blend_averages_predictions_on_the_label_scale_and_probabilities():
    from training.models.blend import BlendModel
    from training.target import LabelScaler
    x = {"f": tf.constant([[0.0], [1.0]])}
    scaler = LabelScaler(log=False, mean=10.0, std=2.0, low=0.0, high=100.0)

    def model(fn):
        return lambda f, training=False: fn(f["f"])
    net = model(lambda v: v)                  # a scaled label: 10 and 12 on the label's scale
    trees = model(lambda v: v * 0 + 20.0)     # the label's own scale
    out = BlendModel(net, scaler, trees, regression=True)(x).numpy()
    np.testing.assert_allclose(out[:, 0], [15.0, 16.0])
    # The network's back-transform is bounded by the train labels before averaging.
    far = BlendModel(model(lambda v: v * 0 + 1e6), scaler, trees, True)(x)
    np.testing.assert_allclose(far.numpy()[:, 0], [60.0, 60.0])
    # Classification: probabilities averaged; logits and log-probabilities in.
    logits = model(lambda v: tf.constant([[0.0, 0.0], [10.0, -10.0]]))
    logp = model(lambda v: tf.math.log(tf.constant([[0.9, 0.1], [0.5, 0.5]])))
    probs = np.exp(BlendModel(logits, None, logp, regression=False)(x).numpy())
    np.testing.assert_allclose(probs, [[0.7, 0.3], [0.75, 0.25]], atol=1e-4)
    with pytest.raises(ValueError):
        BlendModel(net, None, trees, True, network_weight=1.5)


def test_trees_flags_are_checked_before_training(tmp_path):
    from training.config import ConfigError, TrainConfig
    for flag, bad in (("split_axis", "DIAGONAL"), ("growing_strategy", "WIDE"),
                      ("categorical_algorithm", "ONE_HOT"), ("max_num_nodes", 0),
                      ("tree_threads", -1)):
        with pytest.raises(ConfigError, match=flag):
            TrainConfig(data_dir="d", job_dir=str(tmp_path), **{flag: bad})


def test_the_trees_train_on_one_thread_on_a_small_split_unless_told():
    """YDF's threads measured slower than one on small splits (docs/performance.md)."""
    from training.models.trees import tree_threads
    assert tree_threads(0, defaults.TREES_ONE_THREAD_ROWS - 1) == 1
    assert tree_threads(0, defaults.TREES_ONE_THREAD_ROWS) is None  # YDF's: one per core
    assert tree_threads(3, 100) == 3


def test_early_stopping_is_off_when_the_holdout_slice_is_too_small_to_measure():
    small = (defaults.EARLY_STOPPING_MIN_ROWS - 1)
    assert defaults.early_stopping(None, False, small)[0] == 0
    assert "too small" in defaults.early_stopping(None, False, small)[1]
    assert defaults.early_stopping(None, False, 20_000)[0] == defaults.EARLY_STOPPING_PATIENCE
    assert defaults.early_stopping(None, True, 20_000)[0] == 0      # images: on a schedule
    assert defaults.early_stopping(7, False, 10)[0] == 7             # the flag wins
    assert HOLDOUT_BUCKETS == 10


def test_trees_read_numbers_and_categories_and_skip_a_numbers_bucket():
    from preprocessing.contract.schema import ColumnSpec, Schema
    from training.data import FeatureInfo
    from training.models.trees import feature_semantics
    schema = Schema(columns=(ColumnSpec("x", "float", "numeric", num_buckets=4),
                             ColumnSpec("c", "string", "vocabulary"),
                             ColumnSpec("t", "string", "datetime", parts=("hour",)),
                             ColumnSpec("y", "float")), label="y", task="regression")
    info = FeatureInfo(label="y", task="regression", numeric=["x"],
                       categorical={"x_bucket": 4, "c": 5, "t_hour": 24}, feature_spec={},
                       raw_schema=schema)
    assert feature_semantics(info) == {"x": "NUMERICAL", "c": "CATEGORICAL",
                                       "t_hour": "NUMERICAL"}
    # A user's column named like a number's bucket is a column of its own: the bucket beside
    # it is `x_bucket_` (Schema.output_name), and that one is skipped.
    schema = Schema(columns=(ColumnSpec("x", "float", "numeric", num_buckets=4),
                             ColumnSpec("x_bucket", "string", "vocabulary"),
                             ColumnSpec("y", "float")), label="y", task="regression")
    info = FeatureInfo(label="y", task="regression", numeric=["x"],
                       categorical={"x_bucket_": 4, "x_bucket": 7}, feature_spec={},
                       raw_schema=schema)
    assert feature_semantics(info) == {"x": "NUMERICAL", "x_bucket": "CATEGORICAL"}


def test_the_trees_exported_keep_the_count_lowest_over_the_folds():
    from training.models.fold_count import fold_count
    trees = np.arange(1, 301)
    overfit = [(t - 40) ** 2 / 100 + 50 + k for k, t in enumerate([trees] * 3)]
    assert fold_count(overfit).rounds == 40
    # Summed over the folds, not decided by one; the shortest curve bounds the count.
    assert fold_count([np.array([3.0, 1.0, 2.0]), np.array([1.0, 3.0, 0.0]),
                       np.array([2.0, 2.0, 1.0, 0.0])]).rounds == 3
    assert fold_count([np.array([1.0, 0.5]), np.array([2.0, 1.9, 0.0])]).rounds == 2


def test_a_classifications_count_is_the_larger_of_its_lowest_log_loss_and_fewest_errors():
    """Accuracy still rising past the lowest log loss keeps the trees growing; errors lowest
    early (by chance, on a few rows) do not cut them short of the log loss's count."""
    from training.models.fold_count import fold_count
    trees = np.arange(1, 301)
    loss = [(trees - 90) ** 2 / 1e3 + 100 + k for k in range(2)]
    falling = [np.maximum(40 - trees / 10, 20) + k for k in range(2)]   # fewest from 200
    count = fold_count(loss, falling)
    assert (count.by_loss, count.by_errors, count.rounds, count.reached) == (90, 200, 200, 300)
    early = [np.where(trees == 5, 10.0, 30.0)] * 2
    assert fold_count(loss, early).rounds == 90
    # A tie in errors goes to the lower log loss; float32 noise in YDF's accuracy is a tie.
    flat = [np.full(300, 25.0) + np.where(trees == 150, 1e-5, 0.0)] * 2
    assert fold_count(loss, flat).by_errors == 90
    # Curves cut 50 rounds past the lowest log loss while errors still fall: unsettled.
    cut = fold_count([f[:140] for f in loss], [f[:140] for f in falling])
    assert cut.rounds == 140 and cut.errors_unsettled(50, most=300)
    assert not cut.errors_unsettled(50, most=140) and not count.errors_unsettled(50, 300)
    assert fold_count(loss).by_errors is None and not fold_count(loss).errors_unsettled(50, 300)


def test_the_kept_shapes_folds_grow_again_where_a_count_came_near_their_end():
    """Further (stopping on the fold) where the lowest loss neared the trees grown; to the
    end without stopping where a classification's fewest errors neared a stop on log loss;
    not at all where the count is settled or --num_trees was given."""
    from training.models.fold_count import FoldCount
    from training.models.trees import TreesShape
    from training.selection import _grown_again
    shape, ahead = TreesShape(), defaults.FOLD_LOOK_AHEAD
    most, further = defaults.NUM_TREES, defaults.FOLD_MAX_TREES
    assert _grown_again(FoldCount(most - 10, None, most), shape, None, 4) == \
        ((further, True), further)
    unsettled = FoldCount(90, 130, 140)
    assert _grown_again(unsettled, shape, None, 4) == ((most, False), most)
    assert _grown_again(unsettled, shape, 140, 4) == (None, 140)   # its folds grew all 140
    assert _grown_again(FoldCount(90, 140 - ahead, 140), shape, None, 4) == (None, most)
    assert _grown_again(None, shape, None, 1) == (None, most)


@pytest.mark.slow
def test_a_classifications_fold_curves_count_its_errors_and_grow_unstopped(tmp_path,
                                                                           monkeypatch):
    """A classification's trees grown less a fold count that fold's errors after each
    round, the last the errors their predictions make there. The folds' count reads them
    on a train split of ERRORS_COUNT_MIN_ROWS rows or more; grown again without stopping
    (_grown_further), every fold's curve runs to the end, and each fold's trees are cut to
    the count chosen over them."""
    from tests.training.test_forests import _three_classes
    from training.data import choice_fold
    from training.models.fold_count import fold_count
    from training.models.trees import TreesShape, train_trees
    from training.reporting.scoring import predicted
    from training.selection import _grown_further
    prep = _three_classes(tmp_path)
    info, files = load_feature_info(prep), split_files(prep, "train")
    cfg = small_train_config(prep, str(tmp_path / "job"), model="boosted_trees",
                             num_trees=40, shrinkage=0.3)
    fold = choice_fold(1, 4)
    run = train_trees(cfg, info, files, holdout=fold.other())
    assert run.fold_errors.shape == run.fold_losses.shape == (40,)
    pred = predicted(run.model, files, run.info, 512, fold)
    wrong = np.sum((np.argmax(pred.out, -1) != pred.label) * (pred.weight > 0))
    assert wrong > 0 and run.fold_errors[-1] == pytest.approx(wrong, abs=1e-3)
    # A train split of 600 rows: the count by log loss alone, unless the bound is lowered
    assert info.split_rows["train"] < defaults.ERRORS_COUNT_MIN_ROWS
    assert _grown_further(cfg, info, files, 4, TreesShape(), 40)[1].by_errors is None
    monkeypatch.setattr(defaults, "ERRORS_COUNT_MIN_ROWS", 100)
    monkeypatch.setattr(defaults, "FOLD_LOOK_AHEAD", 3)   # stopped, a curve would be short
    grown, count = _grown_further(cfg, info, files, 4, TreesShape(), 40, stop_on_fold=False)
    assert count.reached == 40 and count.by_errors is not None
    again = [train_trees(cfg, info, files, holdout=choice_fold(k, 4).other()) for k in range(4)]
    assert count == fold_count([t.fold_losses for t in again], [t.fold_errors for t in again])
    assert [t.rounds for t in grown] == [count.rounds] * 4


def _trees_without_a_fold(preprocessed, tmp_path, num_trees: int) -> tuple:
    """(config, info, train files, fold 1 of 4, trees of `num_trees` grown without it)."""
    from training.data import choice_fold
    from training.models.trees import train_trees
    data_dir, _ = preprocessed
    cfg = small_train_config(data_dir, str(tmp_path / "job"), model="boosted_trees",
                             num_trees=num_trees)
    info = load_feature_info(data_dir)
    files = split_files(data_dir, "train")
    fold = choice_fold(1, 4)
    return cfg, info, files, fold, train_trees(cfg, info, files, holdout=fold.other())


@pytest.mark.slow
def test_trees_trained_less_a_fold_score_it_after_every_tree(preprocessed, tmp_path):
    """The curve fold_count reads: the held-out fold's summed loss after each tree,
    whose last value is what the trees predict for that fold, and whose k-th is what the
    trees cut to k predict."""
    from training.models.trees import train_trees
    from training.reporting.scoring import scored_rows
    cfg, info, files, fold, run = _trees_without_a_fold(preprocessed, tmp_path, 25)
    assert run.fold_losses.shape == (25,) and run.fold_losses[-1] < run.fold_losses[0]
    metrics, losses = scored_rows(run.model, files, run.info, 512, holdout=fold)
    assert run.fold_losses[-1] == pytest.approx(losses.sum(), rel=1e-3)
    # Cut to its first 10 trees, it scores what the curve said after the 10th.
    cut = run.truncated(10)
    _, cut_losses = scored_rows(cut.model, files, cut.info, 512, holdout=fold)
    assert cut.num_trees == 10 and run.fold_losses[9] == pytest.approx(cut_losses.sum(),
                                                                       rel=1e-3)
    assert train_trees(cfg, info, files, holdout=None, num_trees=7).num_trees == 7


@pytest.mark.slow
def test_a_blend_scored_from_each_familys_predictions_is_the_blend_run_on_the_rows(
        preprocessed, tmp_path):
    """--model auto scores the blend at each weight from the network's and the trees'
    predictions on a fold, each made once (BlendModel.combine): the same rows, metrics and
    per-row losses as the blend model run on that fold, for a network that learnt a scaled
    label (its back-transform applied before the average, the trees' bounds after)."""
    import dataclasses

    from training.models.blend import BlendModel
    from training.reporting.scoring import Predictions, predicted, scored_sums, sums_of
    from training.target import LabelScaler
    _, _, files, fold, trees = _trees_without_a_fold(preprocessed, tmp_path, 10)
    scaler = LabelScaler(log=False, mean=10.0, std=4.0, low=0.0, high=40.0)

    def net(features, training=False):  # scaled: 0.8 x the trees + 2 on the label's scale
        return (trees.model(features) * 0.8 + 2.0 - scaler.mean) / scaler.std
    net_info = dataclasses.replace(trees.info, label_scaler=scaler)
    by_net = predicted(net, files, net_info, 512, fold)
    by_trees = predicted(trees.model, files, trees.info, 512, fold)
    assert len(by_net.out) > 50 and np.array_equal(by_net.label, by_trees.label)
    for weight in (0.25, 0.5, 0.75):
        blend = BlendModel(net, scaler, trees.model, regression=True, network_weight=weight)
        run_sums, run_losses = scored_sums(blend, files, trees.info, 512, fold)
        sums, losses = sums_of(Predictions(blend.combine(by_net.out, by_trees.out).numpy(),
                                           by_trees.label, by_trees.weight), trees.info)
        np.testing.assert_allclose(losses, run_losses, rtol=1e-5, atol=1e-6)
        assert sums.metrics("regression") == pytest.approx(run_sums.metrics("regression"))
        # ... and the weight matters: the network's share moves the loss.
        assert not np.allclose(losses, sums_of(by_trees, trees.info)[1])


@pytest.mark.slow
def test_a_folds_trees_stop_past_their_best_and_grow_again_to_the_count_chosen(
        preprocessed, tmp_path, monkeypatch):
    """A cross-fitted fold's trees stop FOLD_LOOK_AHEAD rounds after the fold's loss last
    improved and keep their best: the same trees as grown to the end (their curve is its
    start). Asked for more rounds than they kept, the choice grows that fold again."""
    from training.data import choice_fold
    from training.models.trees import train_trees
    from training.reporting.scoring import scored_rows
    from training.selection import _cut_or_grown
    monkeypatch.setattr(defaults, "FOLD_LOOK_AHEAD", 5)
    data_dir, _ = preprocessed
    cfg = small_train_config(data_dir, str(tmp_path / "job"), model="boosted_trees",
                             num_trees=80, shrinkage=0.5)  # overfits within 80 rounds
    info, files, fold = load_feature_info(data_dir), split_files(data_dir, "train"), \
        choice_fold(1, 4)
    full = train_trees(cfg, info, files, holdout=fold.other())
    stopped = train_trees(cfg, info, files, holdout=fold.other(), stop_on_fold=True)
    best = int(np.argmin(full.fold_losses)) + 1
    assert full.rounds == 80 and best < 75
    assert stopped.rounds == best and len(stopped.fold_losses) == best + 5
    np.testing.assert_allclose(stopped.fold_losses, full.fold_losses[:best + 5], rtol=1e-5)
    grown = _cut_or_grown(cfg, info, files, 1, 4, stopped, best + 3)
    _, losses = scored_rows(grown.model, files, grown.info, 512, holdout=fold)
    assert grown.rounds == best + 3
    assert losses.sum() == pytest.approx(full.fold_losses[best + 2], rel=1e-3)
    assert _cut_or_grown(cfg, info, files, 1, 4, stopped, best - 2).rounds == best - 2


@pytest.mark.slow
def test_a_table_too_small_for_an_eval_split_is_measured_on_folds_of_the_train_split(tmp_path):
    """datasets' mtcars (32 rows): the hashed tenth of its train.csv held no row, and the
    trainer refused it. `auto` now reports the cross-fitted figures of the model it keeps."""
    from beam_jobs import preprocess
    from training import train_and_evaluate
    from training.data import EmptySplitError
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (40, 3))
    y = 10 * x[:, 0] + 5 * x[:, 1] + rng.normal(0, 0.3, 40)
    src = tmp_path / "small.csv"
    src.write_text("a,b,c,y\n" + "".join(
        f"{a:.4f},{b:.4f},{c:.4f},{v:.4f}\n" for (a, b, c), v in zip(x, y)))
    prep = str(tmp_path / "prep")
    s = preprocess.run(["--input", str(src), "--output", prep, "--label_column", "y",
                        "--split", "0.9,0,0.1"])
    assert s["splits"]["eval"] == 0
    with pytest.raises(EmptySplitError, match="eval split .* is empty"):
        train_and_evaluate(small_train_config(prep, str(tmp_path / "trees"),
                                              model="boosted_trees"))
    m = train_and_evaluate(small_train_config(prep, str(tmp_path / "auto"), model="auto",
                                              choice_folds=2, num_trees=30))
    kept = m["model"]["candidates"][m["model"]["family"]]
    assert m["eval"]["examples"] == s["splits"]["train"] == kept["validation"]["examples"]
    assert m["eval"]["rmse"] == kept["validation"]["rmse"] < np.std(y)
    assert "the eval split is empty" in m["eval"]["measured_on"]
    assert os.path.isdir(m["export_dir"])


@pytest.mark.slow
def test_trees_do_not_memorise_a_category_seen_once(tmp_path, monkeypatch):
    """ISLR's Auto: car names nearly unique per row. A split on a name seen once in training
    memorises its one label (test RMSE 6.7 on Auto, 2.9 with such names grouped). Nor do
    they split on more than MAX_VOCAB values of one feature."""
    from beam_jobs import preprocess
    from training import train_and_evaluate
    from training.models import trees
    rng = np.random.default_rng(0)
    n = 400
    names = rng.permutation([f"model {i}" for i in range(280)] + [f"pair {i // 2}" for i in range(120)])
    x = rng.uniform(0, 1, (n, 5))  # five weak features: one split on a name gains more
    y = 3 * x.sum(axis=1) + rng.normal(0, 0.5, n)
    src = tmp_path / "in.csv"
    src.write_text("id,x0,x1,x2,x3,x4,name,y\n" + "".join(
        f"r{i},{','.join(f'{v:.4f}' for v in x[i])},{names[i]},{y[i]:.4f}\n" for i in range(n)))
    prep = str(tmp_path / "prep")
    s = preprocess.run(["--input", str(src), "--output", prep, "--label_column", "y"])
    assert {c["column"]: c["transform"] for c in s["inferred_columns"]}["name"] == "hash"
    rmse = {}
    for once in (True, False):
        if once:  # what the trees did before: every name kept, even one seen once
            monkeypatch.setattr(trees, "MIN_VOCAB_SMALL", 1)
        else:
            monkeypatch.undo()
        m = train_and_evaluate(small_train_config(prep, str(tmp_path / f"job{once}"),
                                                  model="boosted_trees"))
        rmse[once] = m["eval"]["rmse"]
    assert rmse[False] < 1.0 < rmse[True], rmse  # the noise is 0.5
    # The trees split on at most MAX_VOCAB of a feature's values (the most frequent; YDF
    # groups the rest): 340 names kept when one sighting is enough, 100 under a bound of 100.
    from training.models.trees import train_trees
    info, files = load_feature_info(prep), split_files(prep, "train")
    cfg = small_train_config(prep, str(tmp_path / "vocab"), model="boosted_trees", num_trees=5)

    def values_split_on(bound):
        monkeypatch.setattr(trees, "MIN_VOCAB_SMALL", 1)
        monkeypatch.setattr(trees, "MAX_VOCAB", bound)
        spec = train_trees(cfg, info, files, holdout=None).forest.data_spec()
        column = next(c for c in spec.columns if c.name == "name")
        return column.categorical.number_of_unique_values - 1  # less YDF's out-of-vocabulary
    assert values_split_on(100) == 100 < values_split_on(1000)


def test_folds_trees_grown_at_once_are_the_ones_grown_one_after_another(preprocessed,
                                                                        tmp_path):
    """validation_losses grows the cross-fitted folds' trees in threads (YDF releases the
    GIL): that must not change a tree, or the choice would depend on the thread schedule."""
    import concurrent.futures

    from training.data import choice_fold
    from training.models.trees import train_trees
    from training.reporting.scoring import scored_rows
    data_dir, _ = preprocessed
    cfg = small_train_config(data_dir, str(tmp_path / "job"), model="boosted_trees",
                             num_trees=30)
    info, files = load_feature_info(data_dir), split_files(data_dir, "train")
    others = [choice_fold(fold, 4).other() for fold in (1, 2, 3)]

    def grow(other):
        return train_trees(cfg, info, files, holdout=other, stop_on_fold=True)
    one_by_one = [grow(other) for other in others]
    with concurrent.futures.ThreadPoolExecutor(len(others)) as pool:
        at_once = list(pool.map(grow, others))
    for alone, together in zip(one_by_one, at_once):
        assert alone.fold_losses is not None and alone.rounds == together.rounds
        np.testing.assert_array_equal(alone.fold_losses, together.fold_losses)
        np.testing.assert_array_equal(scored_rows(alone.model, files, alone.info, 512)[1],
                                      scored_rows(together.model, files, together.info, 512)[1])


@pytest.mark.parametrize("model, classes, rows, kind, families, why", [
    ("auto", 3, 10**6, "single", ("network", "trees"), "both families"),
    ("auto", 20, 10**6, "single", ("network", "trees"), "both families"),
    ("auto", 100, 9_000, "single", ("network", "trees"), "both families"),
    ("auto", 200, 9_000, "single", ("network",),
     "200 classes x 9,000 train rows x 10 (cross-fitted folds under 10,000 rows), over "
     "10,000,000: the network alone"),
    ("auto", 100, 100_000, "single", ("network", "trees"), "both families"),  # grown once
    ("auto", 100, 100_001, "single", ("network",),
     "100 classes x 100,001 train rows, over 10,000,000: the network alone"),
    ("auto", 3, 1000, "multi_worker", ("network",), "under a multi_worker cluster"),
    ("boosted_trees", 300, 10**5, "single", ("trees",), "--model"),  # asked for (a warning)
    ("wide_deep", 3, 1000, "single", ("network",), "--model"),
])
def test_auto_trains_the_trees_beside_the_network_up_to_a_bound_on_rows_times_classes(
        model, classes, rows, kind, families, why, tmp_path):
    """YDF grows a tree per class per round: a label of hundreds of classes would keep a
    table's `auto` training for hours, and a small table's cross-fitted folds cost more a
    row. Up to 20 classes the trees are trained whatever the rows."""
    import types

    from training.trainer import model_families
    info = types.SimpleNamespace(image=False, task="classification", n_classes=classes,
                                 split_rows={"train": rows})
    got, reason = model_families(small_train_config(str(tmp_path), str(tmp_path), model=model),
                                 info, kind)
    assert got == families and why in reason
