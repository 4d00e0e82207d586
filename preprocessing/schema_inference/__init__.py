"""A schema inferred from the data when no spec file is given: column statistics over the whole
input (profile.py) and the rules that turn them into a schema (infer.py).
"""
