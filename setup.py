"""The `--setup_file` Dataflow uses to ship this code to its workers; the project itself is
described in pyproject.toml (metadata, packages, the pinned requirements.txt).

    pip install -e .            # for development (or `make install`)
    python -m beam_jobs.preprocess --runner DataflowRunner --setup_file ./setup.py ...
"""
import setuptools

setuptools.setup()
