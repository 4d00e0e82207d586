"""Start a real local TF cluster: one process per task on localhost, each with its TF_CONFIG.

    python -m tools.launch --workers 2 -- --data_dir out/prep --job_dir out/job
    python -m tools.launch --workers 2 --ps 1 -- --data_dir out/prep --job_dir out/job

`--workers N` alone runs N workers under MultiWorkerMirroredStrategy (worker 0 is the chief).
With `--ps M` it runs a chief, N workers and M parameter servers (ParameterServerStrategy).
Each task's output is prefixed with its name. The launcher exits with the chief's status; if
any task fails, it stops the others. Worker and ps tasks of a PS cluster never finish on their
own, so the launcher stops them once the chief is done.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List


def free_ports(n: int) -> List[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def cluster_spec(workers: int, ps: int) -> Dict[str, List[str]]:
    ports = iter(free_ports(workers + ps + (1 if ps else 0)))
    cluster = {"worker": [f"localhost:{next(ports)}" for _ in range(workers)]}
    if ps:
        cluster["chief"] = [f"localhost:{next(ports)}"]
        cluster["ps"] = [f"localhost:{next(ports)}" for _ in range(ps)]
    return cluster


def tasks_of(cluster: Dict[str, List[str]]):
    order = ["ps", "worker", "chief"]  # servers first: the chief connects to them
    return [(t, i) for t in order for i in range(len(cluster.get(t, [])))]


def _pump(proc, name):
    for line in iter(proc.stdout.readline, b""):
        sys.stdout.write(f"[{name}] {line.decode(errors='replace')}")
        sys.stdout.flush()


def launch(workers: int, ps: int, task_args: List[str], module: str = "training.task",
           env: Dict[str, str] | None = None, timeout: float | None = None) -> int:
    cluster = cluster_spec(workers, ps)
    procs = {}
    threads = []
    for ttype, index in tasks_of(cluster):
        name = f"{ttype}{index}"
        task_env = dict(os.environ, **(env or {}))
        task_env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                            "task": {"type": ttype, "index": index}})
        task_env.setdefault("PYTHONUNBUFFERED", "1")
        p = subprocess.Popen([sys.executable, "-m", module] + task_args, env=task_env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs[name] = p
        t = threading.Thread(target=_pump, args=(p, name), daemon=True)
        t.start()
        threads.append(t)
    chief = "chief0" if ps else "worker0"
    # Tasks that must finish by themselves: all workers under all-reduce, the chief under PS.
    finishing = [chief] if ps else [n for n in procs if n.startswith("worker")]
    deadline = None if timeout is None else time.time() + timeout
    status = 0
    try:
        while True:
            codes = {n: procs[n].poll() for n in procs}
            failed = [n for n, c in codes.items() if c not in (None, 0)]
            if failed:
                print(f"launch: task(s) {failed} failed; stopping the cluster", file=sys.stderr)
                status = codes[failed[0]]
                break
            if all(codes[n] == 0 for n in finishing):
                status = 0
                break
            if deadline and time.time() > deadline:
                print("launch: timed out; stopping the cluster", file=sys.stderr)
                status = 124
                break
            time.sleep(0.2)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for t in threads:
            t.join(timeout=5)
    return status


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        own, task_args = argv[:i], argv[i + 1:]
    else:
        own, task_args = argv, []
    parser = argparse.ArgumentParser(prog="python -m tools.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=0)
    parser.add_argument("--timeout", type=float, help="Seconds before the cluster is stopped.")
    args = parser.parse_args(own)
    if args.workers < 1 or args.ps < 0:
        parser.error("--workers must be >= 1 and --ps >= 0")
    if not task_args:
        parser.error("give the task's arguments after --")
    return launch(args.workers, args.ps, task_args, timeout=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
