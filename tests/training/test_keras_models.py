"""The tabular network (training/models/keras_models.py): one layer for all numeric columns
and one embedding table per width, whatever the number of columns."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

from training.config import TrainConfig
from training.data import FeatureInfo
from training.models.keras_models import StackedEmbedding, build_model


def test_a_stacked_embedding_is_each_columns_own_embedding():
    layer = StackedEmbedding([3, 5, 2], 4)
    ids = [tf.constant([0, 2, 1]), tf.constant([4, 0, 3]), tf.constant([1, 1, 0])]
    out = layer(ids).numpy()
    table = layer.table.numpy()
    for row in range(3):
        want = np.concatenate([table[0 + int(ids[0][row])], table[3 + int(ids[1][row])],
                               table[8 + int(ids[2][row])]])
        np.testing.assert_allclose(out[row], want)
    wide = StackedEmbedding([3, 5, 2], 2, total=True)
    got = wide(ids).numpy()
    t = wide.table.numpy()
    np.testing.assert_allclose(got[0], t[0] + t[3 + 4] + t[8 + 1], rtol=1e-6)
    # An id past its column's range stays in its column (clipped), never reads the next's.
    np.testing.assert_allclose(layer([tf.constant([7]), tf.constant([-2]), tf.constant([1])])
                               .numpy()[0], np.concatenate([table[2], table[3], table[9]]))


def test_the_network_does_not_grow_a_layer_per_column(tmp_path):
    """A table of 377 numeric columns made a 1,886-layer model that took ~40 s to trace
    each time it was fitted."""
    def hidden_layers(k):
        info = FeatureInfo(label="y", task="regression", numeric=[f"x{i}" for i in range(k)],
                           categorical={f"c{i}": 4 + i % 3 for i in range(k)},
                           feature_spec={})
        model = build_model(info, TrainConfig(data_dir="d", job_dir=str(tmp_path)))
        assert model(dict({f"x{i}": tf.zeros([2]) for i in range(k)},
                          **{f"c{i}": tf.ones([2], tf.int64) for i in range(k)})).shape == (2, 1)
        return sum(not isinstance(layer, keras.layers.InputLayer) for layer in model.layers)
    assert hidden_layers(40) == hidden_layers(4)
