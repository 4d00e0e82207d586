"""BigQuery table names, and the client the sink uses when BIGQUERY_EMULATOR_HOST is set.

google-cloud-bigquery follows BIGQUERY_EMULATOR_HOST; Beam's BigQuery IO does not (its apitools
client has a fixed endpoint, and it has no flag for one). So, as PUBSUB_EMULATOR_HOST and
STORAGE_EMULATOR_HOST do for the other IOs, the variable points our BigQuery sink at a local
emulator: the client below is what Beam's WriteToBigQuery takes as `test_client`."""
from __future__ import annotations

import os
import re
from typing import Optional, Tuple

EMULATOR_VARIABLE = "BIGQUERY_EMULATOR_HOST"
_TABLE = re.compile(r"^(?:(?P<project>[a-z][a-z0-9.:-]{1,62}[a-z0-9])[:.])?"
                    r"(?P<dataset>[A-Za-z0-9_]{1,1024})\.(?P<table>[\w-]{1,1024})$")


def parse_table(spec: str) -> Tuple[Optional[str], str, str]:
    """PROJECT:DATASET.TABLE, PROJECT.DATASET.TABLE or DATASET.TABLE -> (project or None,
    dataset, table). Raises ValueError naming the forms, e.g. for a partition decorator
    (the batch job adds the run date's itself)."""
    m = _TABLE.fullmatch(spec or "")  # fullmatch: `$` would let a trailing newline pass
    if not m:
        raise ValueError(f"not a BigQuery table: {spec!r} (give PROJECT:DATASET.TABLE, "
                         "PROJECT.DATASET.TABLE or DATASET.TABLE, without a $ partition)")
    return m.group("project"), m.group("dataset"), m.group("table")


def partition(spec: str, run_date: str) -> str:
    """The day partition of `spec` for YYYY-MM-DD: `spec$YYYYMMDD`."""
    return f"{spec}${run_date.replace('-', '')}"


class EndpointClient:
    """What Beam's BigQuery IO calls, on another endpoint, anonymously: the apitools client
    (tables, load jobs) and google-cloud-bigquery's insert_rows_json (streaming inserts).
    Picklable: it holds only the endpoint and project; the clients are made on first use."""

    def __init__(self, endpoint: str, project: str):
        self.endpoint, self.project = endpoint.rstrip("/"), project
        self._api = self._cloud = None

    def __getstate__(self):
        return {"endpoint": self.endpoint, "project": self.project}

    def __setstate__(self, state):
        self.__init__(state["endpoint"], state["project"])

    def __getattr__(self, name):  # tables, jobs, datasets, tabledata: the apitools client's
        if name.startswith("_"):
            raise AttributeError(name)
        if self._api is None:
            from apache_beam.io.gcp.internal.clients import bigquery
            self._api = bigquery.BigqueryV2(url=self.endpoint + "/bigquery/v2/",
                                            get_credentials=False, response_encoding="utf8")
        return getattr(self._api, name)

    def insert_rows_json(self, *args, **kwargs):
        if self._cloud is None:
            from google.api_core.client_options import ClientOptions
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import bigquery
            self._cloud = bigquery.Client(
                project=self.project, credentials=AnonymousCredentials(),
                client_options=ClientOptions(api_endpoint=self.endpoint))
        return self._cloud.insert_rows_json(*args, **kwargs)


def emulator_client(spec: str) -> Optional[EndpointClient]:
    """An EndpointClient on $BIGQUERY_EMULATOR_HOST for the table's project; None when the
    variable is unset (Beam then makes its own client with the job's credentials)."""
    host = os.environ.get(EMULATOR_VARIABLE)
    if not host:
        return None
    endpoint = host if "://" in host else f"http://{host}"
    return EndpointClient(endpoint, parse_table(spec)[0] or "local-project")
