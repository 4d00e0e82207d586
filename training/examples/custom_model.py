"""An example `--model_module`: the trainer calls `build_model(feature_info, config)` and
trains, distributes and exports what it returns, with the transform embedded.

The contract (training/trainer.py):
- `feature_info` (training.data.FeatureInfo): `input_names`; `numeric` (float32 scalars),
  `categorical` (name -> cardinality; int64 ids in [0, cardinality)), `image` (the name of a
  float32 [64, 64, 3] input in [0, 1], image data only), `task` ("regression" or
  "classification") and `n_classes`.
- `config` (training.config.TrainConfig): every flag, e.g. hidden_units, dropout, seed.
- Return a `tf_keras` (Keras 2) Model taking a dict keyed by `feature_info.input_names` and
  giving logits of shape [batch, n_classes] (classification) or [batch, 1] (regression). Do not
  compile it: the trainer compiles it (loss and metrics follow the task), inside the
  distribution strategy's scope, for all four strategies.

    python -m training.task --data_dir out/prep --job_dir out/job \\
        --model_module training/examples/custom_model.py
"""
import tensorflow as tf
import tf_keras as keras


def build_model(feature_info, config):
    """A DNN with batch normalisation over all tabular inputs (categoricals one-hot)."""
    if feature_info.image:
        raise ValueError("this example is for tabular data")
    inputs, columns = {}, []
    for name in feature_info.numeric:
        inputs[name] = keras.Input(shape=(), name=name, dtype=tf.float32)
        columns.append(keras.layers.Reshape((1,))(inputs[name]))
    for name, cardinality in feature_info.categorical.items():
        inputs[name] = keras.Input(shape=(), name=name, dtype=tf.int64)
        columns.append(keras.layers.CategoryEncoding(cardinality, output_mode="one_hot")(
            inputs[name]))
    x = keras.layers.Concatenate()(columns)
    for units in config.hidden_units:
        x = keras.layers.Dense(units, use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    return keras.Model(inputs, keras.layers.Dense(feature_info.n_classes)(x), name="custom")
