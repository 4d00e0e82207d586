"""The model families: the tf_keras models (keras_models.py), fitting the network
(network.py) and the boosted trees (trees.py).

May import: preprocessing, training.callbacks, training.config, training.data,
training.defaults, training.guards, training.holding, training.reporting, training.target.
"""
