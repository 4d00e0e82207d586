"""The export: the SavedModel with the transform inside (export.py), TF Serving's configuration
(serving_config.py) and weight quantisation (quantize.py).
"""
