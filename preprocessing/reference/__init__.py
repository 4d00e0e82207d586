"""Reference sets a model is judged by: the golden set and the gate's rule, feature statistics
(train/serve skew), and the evaluation formulas training and batch prediction share.
"""
