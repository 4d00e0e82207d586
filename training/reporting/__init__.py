"""What a training run reports: metrics.json, report.html and the tuning metric (report.py),
and the kept model's permutation importance (importance.py).
"""
