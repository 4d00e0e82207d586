"""Package setup; also the `--setup_file` Dataflow uses to ship this code to its workers.

    pip install -e .            # for development
    python -m beam_jobs.preprocess --runner DataflowRunner --setup_file ./setup.py ...

Workers run `pip install` on the sdist built from this file, so runtime dependencies are the
pinned ones in requirements.txt.
"""
import os

import setuptools

HERE = os.path.dirname(os.path.abspath(__file__))


def _requirements():
    with open(os.path.join(HERE, "requirements.txt")) as f:
        return [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]


setuptools.setup(
    name="tfdataflow",
    version="0.1.0",
    description="Raw CSV/JPEG -> tf.transform TFRecords -> (distributed) TF training -> "
                "batch and streaming inference, on Beam/Dataflow.",
    python_requires=">=3.11,<3.12",
    packages=setuptools.find_packages(include=["beam_jobs*", "preprocessing*", "training*",
                                               "inference*"]),
    package_data={"preprocessing": ["specs/*.yaml"]},
    include_package_data=True,
    install_requires=_requirements(),
)
