"""Hyperparameter tuning's parts (the command is training/tune.py): the spec, the Optuna study,
trial processes, the study's records and gated publish, the Vertex AI job.
"""
