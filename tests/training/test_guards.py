"""Training refuses runs that would export garbage, each with one line: a bad TF_CONFIG, a
label with one value or extreme values, a loss that stops being a number, and a checkpoint
made on other data."""
import contextlib
import io
import json
import os

import numpy as np
import pytest

from training import guards


@pytest.mark.parametrize("text, message", [
    ("{oops", "TF_CONFIG is not JSON"),
    ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}',
     "task worker:2 is not in the cluster"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "boss", "index": 0}}',
     "task type 'boss'"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}',
     "task index '0'"),
])
def test_a_bad_tf_config_is_one_line_naming_it(text, message):
    with pytest.raises(guards.TrainingError, match=message):
        guards.read_tf_config(text)


def test_a_good_tf_config_passes():
    cfg = {"cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]},
           "task": {"type": "ps", "index": 0}}
    assert guards.read_tf_config(json.dumps(cfg)) == cfg
    assert guards.read_tf_config("") == {}


def test_a_checkpoint_made_on_other_data_is_not_resumed(tmp_path):
    ckpt, backup = str(tmp_path / "ckpt"), tmp_path / "ckpt" / "backup"
    first = {"schema": "s1", "train": "t1", "data_dir": "/d1"}
    guards.check_resume(ckpt, first, str(backup))  # a fresh start records the data
    backup.mkdir(parents=True)
    (backup / "chief").write_text("state")
    guards.check_resume(ckpt, first, str(backup))  # same data: resumes
    with pytest.raises(guards.TrainingError, match="train differ.*new --job_dir"):
        guards.check_resume(ckpt, dict(first, train="t2", data_dir="/d2"), str(backup))


def test_a_non_finite_loss_stops_training_with_its_cause():
    import tf_keras as keras
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile("sgd", "mse")
    x = np.array([[1.0, 2.0]] * 64, np.float32)
    y = np.full(64, 3.0e38, np.float32)  # squared: infinity
    stop = guards.StopOnNonFinite(lambda: "extreme values in y")
    with pytest.raises(guards.TrainingError, match="loss became (inf|nan).*extreme values in y"):
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[stop])


def _prep(tmp_path, rows, label):
    from beam_jobs import preprocess
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "in.csv"
    src.write_text("id,x,z,y\n" + "".join(rows))
    out = str(tmp_path / "prep")
    preprocess.run(["--input", str(src), "--output", out, "--label_column", label])
    return out


def _train(data_dir, job):
    """training.task's command line in this process (a process of its own costs seconds of
    TensorFlow start-up): (its exit code, what it wrote to stderr)."""
    from training import task
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = task.main(["--data_dir", data_dir, "--job_dir", job, "--epochs", "1",
                          "--verbose", "0"])
    return code, err.getvalue()


@pytest.mark.slow
def test_an_extreme_label_and_a_single_class_fail_fast_with_one_line(tmp_path):
    rows = [f"r{i},{i % 17},{i % 5},{(i % 13) * 1.5}\n" for i in range(300)]
    rows[7] = "r7,3,1,1e30\n"
    code, err = _train(_prep(tmp_path / "a", rows, "y"), str(tmp_path / "job_a"))
    assert code == 2 and "label 'y'" in err and "1e+30" in err
    assert not os.path.exists(tmp_path / "job_a" / "export")
    rows = [f"r{i},{i % 17},{i % 5},only\n" for i in range(300)]
    code, err = _train(_prep(tmp_path / "b", rows, "y"), str(tmp_path / "job_b"))
    assert code == 2 and "1 class(es)" in err, err[-2000:]


@pytest.mark.slow
def test_a_feature_named_label_keeps_the_real_labels_classes(tmp_path):
    """A string feature called `label` beside the label `species`: each keeps its own
    vocabulary, so every train row has its class (none is -1, unknown)."""
    import tensorflow_transform as tft

    from beam_jobs import preprocess
    from preprocessing.features.transform import LABEL_VOCAB
    from tests.helpers import read_examples
    src = tmp_path / "in.csv"
    src.write_text("id,label,x,species\n" + "".join(
        f"r{i},tag{i % 4},{i % 11},{['adelie', 'gentoo', 'chinstrap'][i % 3]}\n"
        for i in range(300)))
    out = str(tmp_path / "prep")
    preprocess.run(["--input", str(src), "--output", out, "--label_column", "species"])
    tft_out = tft.TFTransformOutput(out)
    classes = sorted(v.decode() for v in tft_out.vocabulary_by_name(LABEL_VOCAB))
    assert classes == ["adelie", "chinstrap", "gentoo"]
    got = read_examples(os.path.join(out, "train", "*.tfrecord.gz"),
                        {"species": tft_out.transformed_feature_spec()["species"]})
    assert got["species"] and min(got["species"]) >= 0


def test_a_damaged_shard_is_found_and_named(tmp_path):
    import tensorflow as tf
    good, bad = str(tmp_path / "a.tfrecord.gz"), str(tmp_path / "b.tfrecord.gz")
    for path in (good, bad):
        with tf.io.TFRecordWriter(path, options="GZIP") as w:
            for i in range(5000):
                w.write(os.urandom(64))
    assert guards.find_corrupt_shard([good, bad]) is None
    data = open(bad, "rb").read()
    open(bad, "wb").write(data[: len(data) // 2])
    path, n, why = guards.find_corrupt_shard([good, bad])
    assert path == bad and 0 < n < 5000 and "truncated" in why and "function_node" not in why


def _records(raw: bytes):
    """(start, end) of each record in an uncompressed TFRecord stream (8-byte length, 4-byte
    CRC, data, 4-byte CRC)."""
    start = 0
    while start < len(raw):
        end = start + 16 + int.from_bytes(raw[start:start + 8], "little")
        yield start, end
        start = end


def _gzip(raw: bytes, finish: bool) -> bytes:
    import zlib
    z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return z.compress(raw) + z.flush(zlib.Z_FINISH if finish else zlib.Z_SYNC_FLUSH)


def _cut_mid_record(gz: bytes) -> bytes:
    """The shard's stream cut inside the record that straddles its middle, as gzip without
    its end."""
    import gzip
    raw = gzip.decompress(gz)
    start = next(s for s, e in _records(raw) if e > len(raw) // 2)
    return _gzip(raw[:start + 13], finish=False)


def _cut_between_records(gz: bytes) -> bytes:
    """The shard's first half of records, as a complete gzip stream: TensorFlow reads it as a
    shorter shard, without any error."""
    import gzip
    raw = gzip.decompress(gz)
    end = next(e for s, e in _records(raw) if e > len(raw) // 2)
    return _gzip(raw[:end], finish=True)


def _shards(tmp_path):
    import tensorflow as tf
    for name in ("a", "b"):
        with tf.io.TFRecordWriter(str(tmp_path / "train" / f"{name}.tfrecord.gz"),
                                  options="GZIP") as w:
            for _ in range(400):
                w.write(os.urandom(32))
    return {f"train/{p.name}": p.stat().st_size for p in (tmp_path / "train").iterdir()}


def test_a_shard_cut_between_records_or_missing_or_foreign_is_refused(tmp_path):
    """TensorFlow reads a shard cut exactly between two records without error; the sizes
    preprocess listed in its summary tell."""
    import tensorflow as tf
    (tmp_path / "train").mkdir()
    sizes = _shards(tmp_path)
    guards.check_shards(str(tmp_path), sizes, ("train", "eval"))
    guards.check_shards(str(tmp_path), None, ("train",))  # older outputs list no sizes
    b = tmp_path / "train" / "b.tfrecord.gz"
    full = b.read_bytes()
    b.write_bytes(_cut_between_records(full))
    assert 0 < sum(1 for _ in tf.data.TFRecordDataset(str(b), compression_type="GZIP")) < 400
    with pytest.raises(guards.TrainingError, match=r"b.tfrecord.gz is \d+ bytes, preprocess "
                       rf"wrote {len(full)} \(summary.json\): it was cut short"):
        guards.check_shards(str(tmp_path), sizes, ("train",))
    b.unlink()
    with pytest.raises(guards.TrainingError, match="b.tfrecord.gz that preprocess wrote is missing"):
        guards.check_shards(str(tmp_path), sizes, ("train",))
    b.write_bytes(full)
    (tmp_path / "train" / "c.tfrecord.gz").write_bytes(full)
    with pytest.raises(guards.TrainingError, match="c.tfrecord.gz is not a shard preprocess wrote"):
        guards.check_shards(str(tmp_path), sizes, ("train",))


@pytest.mark.slow
def test_damaged_data_and_unwritable_job_dirs_are_one_line_errors(tmp_path):
    rows = [f"r{i},{i % 17},{i % 5},{(i % 13) * 1.5}\n" for i in range(3000)]
    data = _prep(tmp_path, rows, "y")
    for job in ("/proc/tfdataflow_job", str(tmp_path / "prep" / "summary.json" / "job")):
        code, err = _train(data, job)
        assert code == 2 and f"--job_dir {job} is not writable" in err, err
        assert "Traceback" not in err
    # The largest shard: the runner may also write an empty one, which half of is no record.
    shard = max((tmp_path / "prep" / "train").glob("*.tfrecord.gz"), key=lambda p: p.stat().st_size)
    full = shard.read_bytes()
    # Cut between two records: readable, so only the summary's sizes tell.
    shard.write_bytes(_cut_between_records(full))
    code, err = _train(data, str(tmp_path / "job"))
    assert code == 2 and f"TFRecord shard {shard} is " in err, err
    assert "cut short or changed" in err and "Traceback" not in err
    # Cut inside a record, in an output whose summary lists no sizes (older versions): the
    # read itself fails, and the error names the shard.
    summary_path = tmp_path / "prep" / "summary.json"
    summary = json.loads(summary_path.read_text())
    assert summary["files"][f"train/{shard.name}"] == len(full)
    del summary["files"]
    summary_path.write_text(json.dumps(summary))
    shard.write_bytes(_cut_mid_record(full))
    code, err = _train(data, str(tmp_path / "job"))
    assert code == 2 and f"TFRecord shard {shard} is truncated" in err, err
    assert "Traceback" not in err and not (tmp_path / "job" / "export").exists()


def test_a_table_without_feature_columns_is_refused_at_preprocess(tmp_path):
    from beam_jobs import preprocess
    src = tmp_path / "in.csv"
    src.write_text("y\n" + "".join(f"{i % 3}\n" for i in range(50)))
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", str(src), "--output", str(tmp_path / "out"), "--label_column", "y"])
    assert e.value.code != 0 and "no feature columns" in str(e.value), e.value
    assert not (tmp_path / "out").exists()
    # Columns, but only identifiers: refused at launch too, each one's reason named (before,
    # preprocess wrote the splits and training stopped on "no model inputs").
    src.write_text("rownames,serial,y\n" + "".join(f"{i},{1000 + i},{i % 3}\n"
                                                   for i in range(1, 51)))
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", str(src), "--output", str(tmp_path / "out"), "--label_column", "y"])
    assert "no model inputs: every column but the label is an identifier or empty (rownames: " \
           "row numbers" in str(e.value.code) and "serial: row numbers" in str(e.value.code)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rows, model, refused", [
    (3, "auto", True), (29, "auto", True), (30, "auto", False), (3, "wide_deep", False)])
def test_model_auto_on_a_table_too_small_for_its_folds_is_one_line_at_launch(rows, model,
                                                                              refused):
    """3 train rows trained for 70 s, then failed in the choice's empty fold."""
    import types

    from training import trainer
    from training.config import TrainConfig
    cfg = TrainConfig(data_dir="d", job_dir="j", model=model)
    info = types.SimpleNamespace(split_rows={"train": rows})
    families = ("network", "trees") if model == "auto" else ("network",)
    if not refused:
        trainer.check_rows_for_a_choice(cfg, info, families)
        return
    with pytest.raises(guards.TrainingError) as e:
        trainer.check_rows_for_a_choice(cfg, info, families)
    assert f"the train split has {rows} row(s): --model auto" in str(e.value)
    assert "\n" not in str(e.value)
