"""Images as inputs: where the images of a job come from (sources.py: label lists and globs)
and the checks and normalisation each image gets, with a reason for every rejection
(checks.py). The TF function the model applies is features/image_transform.py.
"""
