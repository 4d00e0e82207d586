"""The model families: the tf_keras models (keras_models.py), fitting the network
(network.py) and the boosted trees (trees.py).
"""
