"""The transform shared by training and serving: the tf.transform `preprocessing_fn` (transform.py),
the TF image function (image_transform.py), and user module files (module_files.py).
"""
