"""What the jobs share: the command line (cli.py), the errors a job ends with (errors.py),
options and typed configs (common_options.py), the Finalize step and the publish protocol,
and the local runners (batch, streaming, worker process).
"""
