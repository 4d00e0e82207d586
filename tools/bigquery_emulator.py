"""A local BigQuery (bqemulator, DuckDB-backed; `make install-emulators` puts it in
.venv-bqemulator) on a free loopback port, for the tests. It starts offline: DuckDB's
`spatial` extension, which it loads at start, is copied from the pinned
duckdb-extension-spatial wheel into the extension folder of a HOME of its own instead of
being downloaded. Clients reach it through BIGQUERY_EMULATOR_HOST (google-cloud-bigquery and
this project's BigQuery sink follow it). Its SQL is approximate: use it for the IO contract
(tables, schemas, load jobs, streaming inserts), not for SQL semantics.

    python -m tools.bigquery_emulator   # starts one, prints BIGQUERY_EMULATOR_HOST=..., waits
"""
from __future__ import annotations

import glob
import os
import platform
import shutil
from typing import Dict, List, Optional

from tools.emulator_process import EmulatorError, EmulatorProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_HINT = ("the BigQuery emulator is not installed: run `make install-emulators` "
                "(or set BQEMULATOR_BIN to a bqemulator launcher)")
PROJECT = "local-project"


def find_launcher() -> Optional[str]:
    """$BQEMULATOR_BIN, this checkout's .venv-bqemulator, or `bqemulator` on the PATH."""
    found = [os.environ.get("BQEMULATOR_BIN"),
             os.path.join(ROOT, ".venv-bqemulator", "bin", "bqemulator"),
             shutil.which("bqemulator")]
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


def available() -> bool:
    return find_launcher() is not None


def spatial_extension(launcher: str) -> str:
    """The `spatial.duckdb_extension` file of the launcher's venv (duckdb-extension-spatial)."""
    venv = os.path.dirname(os.path.dirname(os.path.realpath(launcher)))
    files = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages",
                                   "duckdb_extension_spatial", "extensions", "v*",
                                   "spatial.duckdb_extension"))
    if not files:
        raise EmulatorError(f"DuckDB's spatial extension is not installed next to {launcher}: "
                            "pip install duckdb-extension-spatial (the same version as duckdb)")
    return sorted(files)[-1]


def _duckdb_platform() -> str:
    machine = platform.machine().lower()
    return "linux_arm64" if machine in ("aarch64", "arm64") else "linux_amd64"


class BigQueryEmulator(EmulatorProcess):
    """One running emulator; `host` is what BIGQUERY_EMULATOR_HOST takes. `gcs_root`: the
    folder its load jobs read gs://BUCKET/PATH from (the GCS emulator's storage folder)."""

    name = "BigQuery"

    def __init__(self, gcs_root: Optional[str] = None, project: str = PROJECT,
                 timeout: float = 60.0):
        self.launcher = find_launcher()
        if self.launcher is None:
            raise EmulatorError(INSTALL_HINT)
        self.extension = spatial_extension(self.launcher)
        self.gcs_root, self.project = gcs_root, project
        self.ready_path = f"/bigquery/v2/projects/{project}/datasets"
        super().__init__(timeout)

    def environment(self, folder: str) -> Dict[str, str]:
        home = os.path.join(folder, "home")
        version = os.path.basename(os.path.dirname(self.extension))  # v1.5.5
        target = os.path.join(home, ".duckdb", "extensions", version, _duckdb_platform())
        os.makedirs(target)
        shutil.copy(self.extension, target)
        env = dict(os.environ, HOME=home)
        if self.gcs_root:
            env["BQEMU_GCS_LOCAL_ROOT"] = self.gcs_root
        return env

    def command(self, port: int, folder: str) -> List[str]:
        return [self.launcher, "start", "--rest-host", "127.0.0.1", "--rest-port", str(port),
                "--grpc-host", "127.0.0.1", "--grpc-port", "0", "--project", self.project,
                "--log-level", "warning"]

    def client(self):
        """A google-cloud-bigquery client on this emulator (anonymous)."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import bigquery
        return bigquery.Client(project=self.project, credentials=AnonymousCredentials(),
                               client_options=ClientOptions(api_endpoint=f"http://{self.host}"))


def main() -> None:
    try:
        emulator = BigQueryEmulator()
    except EmulatorError as e:
        raise SystemExit(f"bigquery_emulator: error: {e}")
    emulator.serve("BIGQUERY_EMULATOR_HOST")


if __name__ == "__main__":
    main()
