"""Example user module files (`--model_module`): a `build_model` hook as a user writes one.
"""
