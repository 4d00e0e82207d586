"""What the prediction jobs read: serving-time row parsing (rows.py), image sources and bytes
(image_sources.py), images in RowBatches for batch prediction (image_batches.py), and the
local replay source of the streaming job.
"""
